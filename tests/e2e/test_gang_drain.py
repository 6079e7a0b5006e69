"""End to end: gangs that fail, drain and come back as one, on three real workers."""

from __future__ import annotations

import sys

import psutil
import pytest

from tests.e2e.cluster import Cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e
PY = sys.executable


@pytest.fixture
def cluster3(tmp_path):
    """A controller and three workers of one CPU each: one gang task per worker."""
    running = Cluster(tmp_path)
    running.start_controller()
    for name in ("w1", "w2", "w3"):
        running.start_worker(name, cpus=1)
    yield running
    running.stop()


def history(cluster: Cluster, job_id: int) -> list[dict]:
    return cluster.get(f"/api/v1/jobs/{job_id}/history")


def worker_name(cluster: Cluster, worker_id: str) -> str:
    return next(w["name"] for w in cluster.get("/api/v1/workers") if w["id"] == worker_id)


def test_a_failed_member_drains_the_gang_which_resumes_from_its_checkpoints(cluster3, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    script = f"""
        cd {marks}
        i=$CORRAL_TASK_INDEX
        if [ -f "$CORRAL_CHECKPOINT_PATH" ]; then echo "resumed from $(cat "$CORRAL_CHECKPOINT_PATH")"; fi
        if [ "$CORRAL_ATTEMPT" != 0 ]; then echo "attempt $CORRAL_ATTEMPT done"; exit 0; fi
        if [ "$i" = 2 ]; then
            while [ ! -f started-0 ] || [ ! -f started-1 ]; do sleep 0.05; done
            exit 1
        fi
        trap 'echo "step of task $i" > state-$i; {PY} -m corral checkpoint save state-$i; touch term-$i; exit 0' TERM
        touch started-$i
        sleep 300 & wait
    """
    job_id = cluster3.submit(command=["sh", "-c", script], replicas=3, gang=True, max_retries_failure=1,
                             resources={"cpu": 1}, grace_period=20)
    job = cluster3.wait_end(job_id, timeout=60)
    assert job["state"] == "SUCCEEDED"
    assert (job["preemption_epoch"], job["drain_trigger"]) == (1, 2)
    # The survivors got SIGTERM: their traps ran.
    assert (marks / "term-0").exists() and (marks / "term-1").exists()
    tasks = cluster3.tasks(job_id)
    assert [(t["state"], t["failures"], t["preemptions"]) for t in tasks] == [("SUCCEEDED", 0, 0)] * 2 + [
        ("SUCCEEDED", 1, 0)]
    for sibling in tasks[:2]:
        first, second = sibling["attempts"]
        assert (first["state"], first["refunded"], second["state"]) == ("PREEMPTED", True, "SUCCEEDED")
        assert sibling["checkpoint_epoch"] == 1
    first, second = tasks[2]["attempts"]
    assert (first["state"], first["exit_code"], first["refunded"], second["state"]) == ("FAILED", 1, False,
                                                                                      "SUCCEEDED")
    # The checkpoints written during the drain were read back by the next attempts.
    assert cluster3.logs(job_id, task=0) == "resumed from step of task 0\nattempt 1 done\n"
    assert cluster3.logs(job_id, task=1) == "resumed from step of task 1\nattempt 1 done\n"
    assert cluster3.logs(job_id, task=2) == "attempt 1 done\n"
    steps = [(h["handler"], h["result"], h["to_state"]) for h in history(cluster3, job_id) if h["task_id"] is None]
    assert ("DrainGang", "SUCCESS", "DRAINING") in steps and ("CompleteDrain", "SUCCESS", "PENDING") in steps
    from prometheus_client.parser import text_string_to_metric_families

    metrics = {s.name + str(sorted(s.labels.items())): s.value
               for f in text_string_to_metric_families(cluster3.http.get("/metrics").text) for s in f.samples}
    assert metrics["corral_gangs_preempted_total[]"] == 1
    assert metrics["corral_gang_preemptions_completed_total[('outcome', 'requeued')]"] == 1
    assert metrics["corral_gang_drain_seconds_count[]"] == 1
    # One grep of the job id tells the story, each line with the epoch.
    controller_log = (cluster3.root / "controller.log").read_text()
    story = [line for line in controller_log.splitlines() if f"job={job_id} " in line]
    for step in ("gang drain started", "task preempted", "gang drain completed", "gang placed"):
        assert any(step in line and "epoch=1" in line for line in story), step


def test_a_worker_killed_mid_run_drains_the_gang_which_completes_elsewhere(cluster3, tmp_path):
    script = f"""
        if [ "$CORRAL_ATTEMPT" != 0 ]; then exit 0; fi
        touch {tmp_path}/started-$CORRAL_TASK_INDEX
        sleep 300
    """
    job_id = cluster3.submit(command=["sh", "-c", script], replicas=2, gang=True, resources={"cpu": 1},
                             grace_period=1)
    wait_for(lambda: all((tmp_path / f"started-{i}").exists() for i in range(2)), 30, "both tasks to start")
    victim = cluster3.tasks(job_id)[1]["worker_id"]
    cluster3.kill(cluster3.workers[worker_name(cluster3, victim)])
    job = cluster3.wait_end(job_id, timeout=60)
    assert job["state"] == "SUCCEEDED" and job["drain_trigger"] == 1
    lost, survivor = cluster3.tasks(job_id)[1], cluster3.tasks(job_id)[0]
    assert [a["state"] for a in lost["attempts"]] == ["WORKER_FAILED", "SUCCEEDED"]
    assert lost["preemptions"] == 1 and survivor["preemptions"] == 0
    assert (survivor["attempts"][0]["state"], survivor["attempts"][0]["refunded"]) == ("PREEMPTED", True)
    assert victim not in {t["attempts"][-1]["worker_id"] for t in (lost, survivor)}


def test_a_task_ignoring_sigterm_is_killed_after_the_grace_and_stale_epochs_get_409(cluster3, tmp_path):
    pids = tmp_path / "pids"
    script = f"""
        if [ "$CORRAL_TASK_INDEX" = 1 ]; then
            while [ ! -f {pids} ]; do sleep 0.05; done
            exit 1
        fi
        trap '' TERM
        echo $$ > {pids}
        sleep 300
    """
    job_id = cluster3.submit(command=["sh", "-c", script], replicas=2, gang=True, resources={"cpu": 1},
                             grace_period=4)
    stuck = wait_for(lambda: (t := cluster3.tasks(job_id)[0])["state"] == "PREEMPTING" and t, 30,
                     "task 0 to be preempting")
    epoch = stuck["preempt_epoch"]
    base = f"/api/v1/workers/{stuck['worker_id']}/tasks/{stuck['id']}"
    stale = cluster3.http.post(f"{base}/preempted", json={"attempt": 0, "epoch": epoch + 1})  # admin serves too
    assert stale.status_code == 409 and f"epoch {epoch + 1} is not current" in stale.json()["detail"]
    upload = cluster3.http.post(f"{base}/checkpoint", params={"attempt": 0, "epoch": epoch + 1}, content=b"x")
    assert upload.status_code == 409
    too_big = cluster3.http.post(f"{base}/checkpoint", params={"attempt": 0, "epoch": epoch},
                                 content=b"x" * (64 * 2**20 + 1))
    assert too_big.status_code == 413 and "over the limit" in too_big.json()["detail"]
    no_epoch = cluster3.http.post(f"{base}/preempted", json={"attempt": 0})
    assert no_epoch.status_code == 422 and "epoch" in str(no_epoch.json()["detail"])
    unknown = cluster3.http.post(f"/api/v1/workers/{stuck['worker_id']}/tasks/99999/preempted",
                                 json={"attempt": 0, "epoch": epoch})
    assert unknown.status_code == 404 and "no task 99999" in unknown.json()["detail"]
    assert cluster3.http.get(f"{base}/checkpoint").status_code == 404  # nothing saved yet
    anonymous = cluster3.http.post(f"{base}/preempted", json={"attempt": 0, "epoch": epoch},
                                   headers={"Authorization": "Bearer wrong"})
    assert anonymous.status_code == 401
    assert cluster3.tasks(job_id)[0]["state"] == "PREEMPTING"  # the refusals changed nothing
    assert cluster3.tasks(job_id)[0]["checkpoint_epoch"] is None
    job = cluster3.wait_end(job_id, timeout=60)
    assert job["state"] == "FAILED"  # task 1 had no retry left
    preempted, failed = cluster3.tasks(job_id)
    assert failed["state"] == "FAILED"
    ended = preempted["attempts"][0]
    assert (ended["state"], ended["exit_code"]) == ("PREEMPTED", 137) and "SIGKILL" in ended["reason"]
    moves = {h["to_state"]: h["at"] for h in history(cluster3, job_id) if h["task_index"] == 0}
    assert moves["PREEMPTED"] - moves["PREEMPTING"] >= 4  # the grace period, then SIGKILL
    pid = int(pids.read_text())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
