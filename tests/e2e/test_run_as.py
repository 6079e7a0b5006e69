"""Through the real controller and a root worker: a job whose owner has a local account (users.unix_user) runs
as that account, and `corral workers` says the worker runs tasks as their owners."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(os.geteuid() != 0, reason="running a task as another user needs a root worker")]


@pytest.fixture
def account():
    name = f"crl{os.getpid()}e2e"
    subprocess.run(["useradd", "-M", name], check=True, capture_output=True)
    yield name
    subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture
def cluster():
    """Not under pytest's tmp_path, which only root may cross: the task's account must reach its directory."""
    root = Path(tempfile.mkdtemp(prefix="corral-run-as-e2e-"))
    root.chmod(0o755)
    running = Cluster(root)
    running.start_controller()
    yield running
    running.stop()
    shutil.rmtree(root, ignore_errors=True)


def test_a_job_runs_as_its_owners_local_account_and_workers_say_so(cluster, account):
    job = cluster.submit(name="whoami", command=["sh", "-c", "id -un; echo $HOME"], resources={"cpu": 1})
    # Until users are made through the API (corral user create --unix-user), the rows are written directly.
    with sqlite3.connect(cluster.data_dir / "corral.db") as db:
        db.execute("INSERT INTO users (name, cluster_admin, unix_user, created_at) VALUES (?, 0, ?, ?)",
                   ("alice", account, time.time()))
        db.execute("UPDATE jobs SET owner = 'alice' WHERE id = ?", (job,))
    cluster.start_worker("w1")
    assert cluster.wait_end(job, timeout=60)["state"] == "SUCCEEDED", cluster.log("w1")
    name, home = cluster.logs(job).split()
    assert name == account and home == f"/home/{account}"

    admins = cluster.submit(name="as-admin", command=["id", "-un"], resources={"cpu": 1})
    assert cluster.wait_end(admins, timeout=60)["state"] == "SUCCEEDED"
    assert cluster.logs(admins).strip() == "root"

    [worker] = cluster.get("/api/v1/workers")
    assert (worker["run_as_owners"], worker["account"]) == (True, "root")
    listing = subprocess.run([sys.executable, "-m", "corral", "workers"], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "CORRAL_URL": cluster.url, "CORRAL_TOKEN": cluster.admin_token})
    assert listing.returncode == 0, listing.stderr
    assert "RUNS AS" in listing.stdout and listing.stdout.splitlines()[1].split()[-1] == "owners"
