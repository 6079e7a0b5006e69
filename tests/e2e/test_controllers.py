"""Several controllers on one PostgreSQL store and one data directory: shared tokens and settings, wakeups across
controllers (a job submitted on one starts at once on a worker of another), the registry, and cluster.json."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import httpx
import pytest

from tests.e2e.cluster import Cluster
from tests.postgres import scratch_database
from tests.waiting import wait_for

PY = sys.executable
SLOW_HEARTBEAT = 3.0  # a worker's long poll: without a wakeup across controllers, orders wait this long


@pytest.fixture
async def two_controllers(tmp_path):
    """Controllers A and B on one PostgreSQL database, sharing one data directory; no worker yet."""
    async with scratch_database() as url:
        first = Cluster(tmp_path / "a", db_url=url, heartbeat_interval=SLOW_HEARTBEAT)
        second = Cluster(tmp_path / "b", db_url=url, heartbeat_interval=SLOW_HEARTBEAT)
        for cluster in (first, second):
            cluster.root.mkdir()
            cluster.data_dir = tmp_path / "data"
        first.start_controller()
        second.start_controller()
        try:
            yield first, second
        finally:
            second.stop()
            first.stop()


def test_a_job_submitted_on_one_controller_starts_at_once_on_a_worker_of_the_other(two_controllers):
    first, second = two_controllers
    second.start_worker("w1", cpus=8)
    latencies = []
    for _ in range(5):
        submitted = time.monotonic()
        job_id = first.submit(command=[PY, "-c", "import time; time.sleep(60)"], resources={"cpu": 1})
        wait_for(lambda job_id=job_id: first.tasks(job_id)[0]["state"] == "RUNNING", 10, f"job {job_id}'s task to run")
        latencies.append(time.monotonic() - submitted)
    assert statistics.median(latencies) < 0.5, latencies  # without the wakeup: about SLOW_HEARTBEAT each


def test_tokens_settings_and_the_registry_are_shared(two_controllers, tmp_path):
    first, second = two_controllers
    assert (first.admin_token, first.join_token) == (second.admin_token, second.join_token)
    assert httpx.get(f"{second.url}/api/v1/jobs", headers={"Authorization": f"Bearer {first.admin_token}"}
                     ).status_code == 200
    # B keeps the pool's policy once a submission read it; a change on A makes B read it again.
    big = {"command": ["true"], "resources": {"cpu": 4}}
    assert second.http.post("/api/v1/jobs", json=big).status_code == 201
    assert first.http.put("/api/v1/admin/pools/default", json={"max_per_job": {"cpu": 2}}).status_code == 200
    wait_for(lambda: second.http.post("/api/v1/jobs", json=big).status_code == 400, 5, "B to refuse the big job")

    listed = wait_for(lambda: len(rows := second.get("/api/v1/controllers", state="live")) == 2 and rows, 10,
                      "both controllers in the registry")
    assert {row["url"] for row in listed} == {first.url, second.url}
    assert [row["this"] for row in listed if row["url"] == second.url] == [True]
    wait_for(lambda: all(row["last_pass_at"] and row["handlers"] for row in second.get("/api/v1/controllers")), 10,
             "each controller's passes and handlers in the registry")
    assert second.http.get("/api/v1/controllers", params={"state": "dead"}).status_code == 422
    assert httpx.get(f"{second.url}/api/v1/controllers").status_code == 401
    table = subprocess.run([PY, "-m", "corral", "controllers"], capture_output=True, text=True, timeout=60,
                           env={"CORRAL_URL": second.url, "CORRAL_TOKEN": second.admin_token, "PATH": "/usr/bin:/bin",
                                "PYTHONPATH": ":".join(sys.path), "COLUMNS": "200"})
    assert table.returncode == 0 and first.url in table.stdout and "live" in table.stdout, table

    # cluster.json names both; when B stops it names A, and B's row is gone from the registry.
    cluster_file = first.data_dir / "cluster.json"
    assert set(json.loads(cluster_file.read_text())["urls"]) == {first.url, second.url}
    second.stop()
    second.controller.wait(timeout=30)
    assert json.loads(cluster_file.read_text())["urls"] == [first.url]
    assert json.loads(cluster_file.read_text())["url"] == first.url
    assert [row["url"] for row in first.get("/api/v1/controllers")] == [first.url]

    # A SQLite controller never shares the directory; a controller given another admin token refuses to start.
    sqlite = subprocess.run([PY, "-m", "corral", "controller", "--data-dir", str(first.data_dir), "--port", "1"],
                            capture_output=True, text=True, timeout=60)
    assert sqlite.returncode != 0 and f"is in use by the controller with pid {first.controller.pid}" in sqlite.stderr
    wrong = subprocess.run([PY, "-m", "corral", "controller", "--data-dir", str(tmp_path / "other"), "--port", "1",
                            "--db", first.db_url], env={**os.environ, "CORRAL_ADMIN_TOKEN": "not-the-cluster-one"},
                           capture_output=True, text=True, timeout=60)
    assert wrong.returncode != 0 and len(wrong.stderr.strip().splitlines()) == 1, wrong.stderr
    assert "CORRAL_ADMIN_TOKEN is not the admin token the store" in wrong.stderr
    on_command_line = subprocess.run([PY, "-m", "corral", "controller", "--data-dir", str(tmp_path / "other"),
                                      "--db", first.db_url, "--admin-token", "not-the-cluster-one"],
                                     capture_output=True, text=True, timeout=60)
    assert on_command_line.returncode == 2 and "visible to every user" in on_command_line.stderr


def test_exec_through_one_controller_into_a_task_on_a_worker_of_the_other(two_controllers):
    """The worker dials back to the controller holding the client's end, not to its own."""
    first, second = two_controllers
    first.start_worker("w1", cpus=2)
    job_id = first.submit(command=["sh", "-c", "sleep 300"], env={"SECRET_WORD": "swordfish"})
    first.wait_running(job_id)
    done = subprocess.run([PY, "-m", "corral", "exec", str(job_id), "--", "sh", "-c", 'echo "$SECRET_WORD"'],
                          env={**os.environ, "CORRAL_URL": second.url, "CORRAL_TOKEN": second.admin_token},
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and done.stdout == "swordfish\n", done.stderr
    attachment = wait_for(lambda: (a := second.get(f"/api/v1/jobs/{job_id}/attachments")[0])["state"] == "closed" and a,
                          10, "the channel to be recorded closed")
    assert attachment["detail"]["url"] == second.url, attachment
    first.http.post(f"/api/v1/jobs/{job_id}/cancel")
