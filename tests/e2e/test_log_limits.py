"""Log caps and retention with a real controller and worker: a chatty task's output is cut at the cap on both
sides, with a marker `corral logs` shows; ended jobs' logs and attempt directories go after their retention."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from corral.core.log_limits import truncation_marker
from tests.e2e.cluster import Cluster
from tests.waiting import wait_for

PY = sys.executable
CHATTY = [PY, "-c", "import sys\nfor _ in range(3000): sys.stdout.write('z' * 999 + '\\n')\n"
                    "print('done', file=sys.stderr)"]


@pytest.fixture
def capped(tmp_path):
    running = Cluster(tmp_path)
    running.start_controller("--log-limit", "20K")
    running.start_worker("w1", 4, "--log-limit", "50K")
    yield running
    running.stop()


def test_output_past_the_caps_ends_with_the_marker_and_is_bounded_on_worker_and_controller(capped):
    job_id = capped.submit(command=CHATTY)
    assert capped.wait_end(job_id)["state"] == "SUCCEEDED"
    task_id = capped.tasks(job_id)[0]["id"]

    env = {**os.environ, "CORRAL_URL": capped.url, "CORRAL_TOKEN": capped.admin_token}
    shown = subprocess.run([PY, "-m", "corral", "logs", str(job_id)], capture_output=True, env=env, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == (b"z" * 999 + b"\n") * 20 + truncation_marker(20_000)
    assert shown.stdout.endswith(b"[corral: log truncated at 20.0K; further output dropped]\n")

    stored = capped.data_dir / "logs" / "tasks" / f"task-{task_id}" / "0.stdout"
    assert stored.stat().st_size == 20_000 + len(truncation_marker(20_000))
    on_worker = capped.root / "w1" / "tasks" / f"{task_id}-0" / "stdout"
    assert on_worker.read_bytes().endswith(truncation_marker(50_000))
    assert on_worker.stat().st_size == 50_000 + len(truncation_marker(50_000))
    assert capped.logs(job_id, stream="stderr") == "done\n"


def test_logs_and_attempt_directories_of_ended_jobs_go_after_their_retention(tmp_path):
    cluster = Cluster(tmp_path)
    try:
        cluster.start_controller("--log-retention", "5s")
        cluster.start_worker("w1", 4, "--attempt-retention", "5s")
        job_id = cluster.submit(command=["echo", "kept a while"])
        assert cluster.wait_end(job_id)["state"] == "SUCCEEDED"
        task_id = cluster.tasks(job_id)[0]["id"]
        assert cluster.logs(job_id) == "kept a while\n"
        stored = cluster.data_dir / "logs" / "tasks" / f"task-{task_id}"
        attempt_dir = cluster.root / "w1" / "tasks" / f"{task_id}-0"
        wait_for(lambda: not stored.exists() and not attempt_dir.exists(), 30, "retention to remove the logs")
        assert cluster.logs(job_id) == ""
    finally:
        cluster.stop()
