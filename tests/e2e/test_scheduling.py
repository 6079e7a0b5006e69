"""Scheduling policy end to end: real controller and worker processes, real commands."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import httpx
import pytest

from tests.e2e.cluster import Cluster, free_port
from tests.waiting import wait_for


def test_a_job_asking_for_1000_gpus_ends_unschedulable_with_its_reason(cluster):
    job_id = cluster.submit(command=["true"], gang=True, replicas=125, resources={"gpu": 8}, scheduling_timeout="2s")
    job = cluster.wait_end(job_id, timeout=30)
    assert job["state"] == "UNSCHEDULABLE"
    assert job["pending_reason"] == (
        "not placed within its scheduling timeout (2s); last reason: needs 8 gpu per task; no worker has that much "
        "(largest: 0 gpu on w1); waiting for one to join")


@pytest.fixture
def fair_cluster(tmp_path):
    config = tmp_path / "corral.yaml"
    config.write_text("pools:\n  default: {sequencer: fair-share}\n")
    running = Cluster(tmp_path)
    running.start_controller("--config", str(config))
    yield running
    running.stop()


def test_fair_share_gives_two_projects_about_half_the_running_slots_each(fair_cluster):
    cluster = fair_cluster
    assert cluster.get("/api/v1/admin/pools")["default"]["sequencer"] == "fair-share"
    # Project a submits all its jobs first: in FIFO order it would take every slot.
    ids = {project: [cluster.submit(command=["sleep", "0.3"], project=project) for _ in range(50)]
           for project in ("a", "b")}
    cluster.start_worker("w1", 2)
    cluster.start_worker("w2", 2)
    samples = []
    done = {}

    def enough_done() -> bool:
        jobs = {j["id"]: j for j in cluster.get("/api/v1/jobs", limit=1000)["items"]}
        running = {p: sum(1 for i in ids[p] if jobs[i]["state"] in ("RUNNING", "SCHEDULED")) for p in ids}
        if sum(running.values()) == 4:
            samples.append(running["a"])
        # Counted in the same read as the condition: jobs go on finishing while a later read is made.
        done.update({p: sum(jobs[i]["state"] == "SUCCEEDED" for i in ids[p]) for p in ids})
        return sum(done.values()) >= 40

    wait_for(enough_done, 120, "40 jobs to finish")
    assert 15 <= done["a"] <= 25 and 15 <= done["b"] <= 25, done
    assert samples and 1.5 <= sum(samples) / len(samples) <= 2.5, samples


def test_pools_labels_and_constraints_across_real_workers(bare_cluster):
    cluster = bare_cluster
    cluster.start_worker("plain", 2)
    cluster.start_worker("gpu-box", 2, "--pool", "gpu", "--label", "gpu=h100", "--gpus", "2", "--resource", "nvlink=1")
    workers = {w["name"]: w for w in cluster.get("/api/v1/workers")}
    assert workers["gpu-box"]["pool"] == "gpu" and workers["gpu-box"]["capacity"]["nvlink"] == 1
    assert [g["model"] for g in workers["gpu-box"]["gpus"]] == ["virtual", "virtual"]
    placed = cluster.submit(command=["sh", "-c", "echo $CUDA_VISIBLE_DEVICES"], pool="gpu", replicas=2,
                            constraints=["gpu=h100"], resources={"gpu": 1, "custom": {"nvlink": 0.5}})
    assert cluster.wait_end(placed)["state"] == "SUCCEEDED"
    devices = sorted(cluster.logs(placed, task).strip() for task in (0, 1))
    assert devices == ["0", "1"]  # two tasks never share a device
    unmatched = cluster.submit(command=["true"], pool="gpu", constraints=["gpu=b200"])
    job = wait_for(lambda: (j := cluster.job(unmatched))["pending_reason"] and j, 10, "a pending reason")
    assert job["pending_reason"] == "no worker in pool gpu matches constraint gpu=b200"
    analysis = cluster.get(f"/api/v1/jobs/{unmatched}/placement")
    assert {w["name"]: w["why"] for w in analysis["workers"]} == {
        "plain": "in pool default, not gpu", "gpu-box": "has gpu=h100; the job needs gpu=b200"}


def test_gpu_memory_decides_which_jobs_virtual_gpus_can_take(bare_cluster):
    cluster = bare_cluster
    cluster.start_worker("gpu-box", 2, "--gpus", "2", "--gpu-memory", "24G")
    (worker,) = cluster.get("/api/v1/workers")
    assert [g["memory"] for g in worker["gpus"]] == [24 * 10**9] * 2
    big = cluster.submit(command=["true"], resources={"gpu": 1, "gpu_memory": "40G"})
    small = cluster.submit(command=["sh", "-c", "echo $CUDA_VISIBLE_DEVICES"],
                           resources={"gpu": 1, "gpu_memory": "16G"})
    assert cluster.wait_end(small)["state"] == "SUCCEEDED"
    assert cluster.logs(small).strip() == "0"
    job = wait_for(lambda: (j := cluster.job(big))["pending_reason"] and j, 10, "a pending reason")
    assert job["state"] == "PENDING"
    assert job["pending_reason"] == ("needs 1 gpu with at least 40G memory per task; no worker has that much "
                                     "(largest: gpu-box has 2 gpu of 24G); waiting for one to join")
    analysis = cluster.get(f"/api/v1/jobs/{big}/placement")
    assert [w["why"] for w in analysis["workers"]] == [
        "too small: has 2 gpu of 24G, a task needs 1 gpu with at least 40G memory"]


def test_dependencies_run_in_order_and_a_failed_one_fails_its_dependants(cluster):
    first = cluster.submit(command=["sh", "-c", "sleep 0.5; exit 3"])
    needs = cluster.submit(command=["true"], after=[first])
    anyway = cluster.submit(command=["true"], after_any=[first])
    assert cluster.wait_end(needs)["state"] == "FAILED"
    assert cluster.wait_end(anyway)["state"] == "SUCCEEDED"
    history = cluster.get(f"/api/v1/jobs/{needs}/history")
    assert any(h["message"] == f"dependency job {first} ended FAILED; this job cannot run" for h in history)
    assert cluster.job(first)["finished_at"] <= cluster.job(anyway)["finished_at"]


def test_admin_api_sets_pools_and_quotas_and_refuses_bad_input(bare_cluster):
    http = bare_cluster.http
    assert http.put("/api/v1/admin/pools/a100", json={"strategy": "dispersed", "max_per_job": {"gpu": 16},
                                                       "reservation_time": "5m"}).status_code == 200
    assert bare_cluster.get("/api/v1/admin/pools/a100")["reservation_time"] == 300
    assert http.put("/api/v1/admin/projects/vision/quota", json={"limits": {"gpu": 8}}).status_code == 200
    assert bare_cluster.get("/api/v1/admin/quotas") == {"vision": {"limits": {"gpu": 8.0}}}
    too_big = http.post("/api/v1/jobs", json={"command": ["true"], "pool": "a100", "replicas": 3,
                                              "resources": {"gpu": 8}})
    assert too_big.status_code == 400
    assert too_big.json()["detail"] == "pool a100: the job asks 24 gpu in total; the pool allows at most 16 per job"
    for path, body in (("/api/v1/admin/pools/a100", {"strategy": "random"}),
                       ("/api/v1/admin/pools/a100", {"colour": "blue"}),
                       ("/api/v1/admin/projects/vision/quota", {"limits": {"gpu": -1}}),
                       ("/api/v1/admin/pools/bad%20name", {})):
        assert http.put(path, json=body).status_code == 422, path
    assert http.delete("/api/v1/admin/projects/nobody/quota").status_code == 404
    assert http.get("/api/v1/jobs/999/placement").status_code == 404
    missing_dependency = http.post("/api/v1/jobs", json={"command": ["true"], "after": [999]})
    assert missing_dependency.status_code == 400 and "no job 999" in missing_dependency.json()["detail"]
    assert bare_cluster.get("/api/v1/jobs")["items"] == []
    assert http.put("/api/v1/admin/pools/a100", json={"strategy": "dispersed"},
                    headers={"Authorization": f"Bearer {bare_cluster.join_token}"}).status_code == 401


def test_corral_up_passes_gpus_and_labels_to_its_workers(tmp_path):
    port = free_port()
    data_dir = tmp_path / "up"
    log = (tmp_path / "up.log").open("wb")
    up = subprocess.Popen([sys.executable, "-m", "corral", "up", "--workers", "1", "--port", str(port),
                           "--data-dir", str(data_dir), "--worker-cpus", "2", "--worker-gpus", "2",
                           "--worker-label", "gpu=h100", "--worker-label", "zone=a"],
                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def workers() -> list:
        if up.poll() is not None:
            raise AssertionError(f"corral up exited: {(tmp_path / 'up.log').read_text()}")
        try:
            token = json.loads((data_dir / "cluster.json").read_text())["admin_token"]
            return httpx.get(f"http://127.0.0.1:{port}/api/v1/workers", headers={"Authorization": f"Bearer {token}"},
                             timeout=5).json()
        except (OSError, ValueError, KeyError, httpx.HTTPError):
            return []

    try:
        (worker,) = wait_for(workers, 60, "corral up's worker to register")
        assert worker["labels"] == {"gpu": "h100", "zone": "a"}
        assert worker["capacity"]["gpu"] == 2 and len(worker["gpus"]) == 2
    finally:
        os.killpg(up.pid, signal.SIGINT)
        up.wait(timeout=60)
@pytest.mark.timeout(240)  # the sleepers that are not preempted run their full 60 s before the job can end
def test_a_high_priority_job_preempts_low_sleepers_which_come_back_and_finish(cluster, tmp_path):
    marks = tmp_path / "sigterm"
    marks.mkdir()
    # 2 workers x 4 cores: eight low-priority sleepers fill the cluster.
    script = (f"trap 'touch {marks}/$CORRAL_TASK_INDEX-$CORRAL_ATTEMPT; exit 143' TERM; "
              "if [ $CORRAL_ATTEMPT = 0 ]; then sleep 60 & wait; fi")
    low = cluster.submit(command=["sh", "-c", script], replicas=8, priority="low", grace_period="5s")
    wait_for(lambda: cluster.job(low)["task_counts"].get("RUNNING") == 8, 60, "eight sleepers running")
    high = cluster.submit(command=["sh", "-c", "echo high ran"], priority="high", resources={"cpu": 4})
    assert cluster.wait_end(high, timeout=60)["state"] == "SUCCEEDED"
    assert cluster.logs(high).strip() == "high ran"
    victims = [t for t in cluster.tasks(low) if t["preemptions"] >= 1]
    assert 1 <= len(victims) <= 4  # the fewest that free 4 cores on one worker
    assert sorted(p.name for p in marks.iterdir()) == sorted(f"{t['index']}-0" for t in victims)  # SIGTERM seen
    assert cluster.wait_end(low, timeout=90)["state"] == "SUCCEEDED"  # the victims came back and finished


def test_a_pending_job_says_when_it_starts_and_its_estimate_is_held_to_account(bare_cluster):
    cluster = bare_cluster
    cluster.start_worker("w1", 1)
    first = cluster.submit(command=["sleep", "600"], resources={"cpu": 1}, time_limit="10m")
    cluster.wait_running(first)
    second = cluster.submit(command=["true"], resources={"cpu": 1})
    estimate = wait_for(lambda: cluster.job(second)["estimate"], 20, "the second job's start estimate")
    assert estimate["after_job"] == first and estimate["basis"] == f"job {first}'s end: its time limit"
    assert estimate["text"] in (f"~10m after job {first}", f"~9m after job {first}")
    env = {"CORRAL_URL": cluster.url, "CORRAL_TOKEN": cluster.admin_token, "PATH": "/usr/bin:/bin",
           "PYTHONPATH": ":".join(sys.path), "COLUMNS": "200"}

    def corral(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "corral", *args], capture_output=True, text=True, timeout=60,
                              env=env)
        assert done.returncode == 0, done
        return done.stdout

    assert "START" in corral("jobs") and f"after job {first}" in corral("jobs")
    assert f"job {first}'s end: its time limit" in corral("info", str(second))
    # The running job ends early: the waiting one starts, and its estimate is held to account.
    assert cluster.http.post(f"/api/v1/jobs/{first}/cancel").status_code == 200
    assert cluster.wait_end(second, timeout=30)["state"] == "SUCCEEDED"
    stats = wait_for(lambda: (found := cluster.get("/api/v1/stats/estimates"))["count"] and found, 20,
                     "the estimate's error on record")
    (row,) = stats["horizons"]  # it said ~10 min and the job started within the minute: that error is on record
    assert row["horizon"] == "under 1 min" and row["count"] == 1 and row["median_error"] > 500
    assert "MEDIAN ERROR" in corral("stats", "estimates")
