"""`make bench`: how fast a gang drains and is placed again after a member fails.

A local cluster of three workers (one CPU each, heartbeat 1 s) runs a gang of three; task 2
exits 1 once its siblings run; the siblings trap SIGTERM and exit. The figure is the median
time from the triggering failure (the controller's record of it) to the gang being placed
again (its next ScheduleJobs), beside the target: two heartbeat intervals plus the grace the
job used (the longest PREEMPTING -> PREEMPTED of its siblings).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.cluster import Cluster  # noqa: E402  (the same harness the e2e tests use)

HEARTBEAT = 1.0
SAMPLES = 7
WORKLOAD = {"replicas": 3, "gang": True, "resources": {"cpu": 1}, "max_retries_failure": 1, "grace_period": 5}
SCRIPT = """
cd {marks}
i=$CORRAL_TASK_INDEX
if [ "$CORRAL_ATTEMPT" != 0 ]; then exit 0; fi
if [ "$i" = 2 ]; then
    while [ ! -f started-0 ] || [ ! -f started-1 ]; do sleep 0.02; done
    exit 1
fi
trap 'exit 0' TERM
touch started-$i
sleep 300 & wait
"""


def drain_sample(cluster: Cluster, marks: Path) -> tuple[float, float]:
    """(seconds from the failure to the gang placed again, seconds of grace the siblings used)."""
    marks.mkdir()
    job_id = cluster.submit(command=["sh", "-c", SCRIPT.format(marks=marks)], **WORKLOAD)
    job = cluster.wait_end(job_id, timeout=120)
    assert job["state"] == "SUCCEEDED" and job["preemption_epoch"] == 1, job
    history = cluster.get(f"/api/v1/jobs/{job_id}/history")
    failed = next(h["at"] for h in history if h["task_index"] == 2 and h["to_state"] == "FAILED")
    placed = next(h["at"] for h in history
                  if h["task_id"] is None and h["handler"] == "ScheduleJobs" and h["at"] >= failed)
    moves: dict[int, dict[str, float]] = {}
    for h in history:
        if h["task_index"] in (0, 1) and h["to_state"] in ("PREEMPTING", "PREEMPTED"):
            moves.setdefault(h["task_index"], {})[h["to_state"]] = h["at"]
    grace = max(m["PREEMPTED"] - m["PREEMPTING"] for m in moves.values())
    return placed - failed, grace


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="corral-bench-drain-") as tmp:
        cluster = Cluster(Path(tmp), heartbeat_interval=HEARTBEAT, loss_timeout=30)
        cluster.start_controller()
        for name in ("w1", "w2", "w3"):
            cluster.start_worker(name, cpus=1)
        try:
            samples = [drain_sample(cluster, Path(tmp) / f"marks-{n}") for n in range(SAMPLES)]
        finally:
            cluster.stop(strict=False)  # a slow stop is said, the figures still printed
    replace = [s[0] for s in samples]
    grace = statistics.median(s[1] for s in samples)
    target = 2 * HEARTBEAT + grace
    median = statistics.median(replace)
    print(f"gang drain, 3 tasks on 3 workers, heartbeat {HEARTBEAT:g}s: failure to placed again median "
          f"{median * 1000:.0f} ms (min {min(replace) * 1000:.0f}, max {max(replace) * 1000:.0f}, n={SAMPLES}); "
          f"target < {target * 1000:.0f} ms (2 heartbeats + {grace * 1000:.0f} ms grace used): "
          f"{'met' if median < target else 'MISSED'}", flush=True)


if __name__ == "__main__":
    main()
