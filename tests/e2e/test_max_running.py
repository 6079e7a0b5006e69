"""--max-running on a real cluster: never more than K of the job's tasks run at once, though room is there."""

from __future__ import annotations


def test_no_more_than_max_running_tasks_overlap_and_the_waiting_ones_say_why(cluster, tmp_path):
    times = tmp_path / "times"
    script = (f'echo "start $(date +%s.%N)" >> {times}; sleep 1; echo "end $(date +%s.%N)" >> {times}')
    job_id = cluster.submit(command=["sh", "-c", script], replicas=6, max_running=2, resources={"cpu": 1})
    assert cluster.wait_end(job_id, timeout=90)["state"] == "SUCCEEDED"
    history = cluster.get(f"/api/v1/jobs/{job_id}/history")
    assert "2 of its tasks run, at most 2 at once (--max-running)" in {h["message"] for h in history}
    events = sorted((float(at), +1 if what == "start" else -1)
                    for what, at in (line.split() for line in times.read_text().splitlines()))
    assert len(events) == 12
    running, most = 0, 0
    for _, step in events:
        running += step
        most = max(most, running)
    assert most == 2  # 8 free cores: without the cap all 6 would overlap
