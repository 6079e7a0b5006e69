"""Jobs with Python packages (`pip`) and an interpreter (`python`), on a real cluster whose worker installs from
wheels made here: its own uv configuration has a find-links directory and no index, so nothing reaches the internet."""

from __future__ import annotations

import os
import subprocess
import sys

import cloudpickle
import pytest

from corral.client.http import Client
from tests.e2e.cluster import Cluster
from tests.waiting import wait_for
from tests.wheels import make_wheel

pytestmark = pytest.mark.e2e
cloudpickle.register_pickle_by_value(sys.modules[__name__])

OWN_PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"
IMPORT = ["python", "-c", "import sys, thepkg; print(thepkg.VERSION, sys.prefix)"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One worker (so every job shares its cache) installing from a local find-links directory only."""
    root = tmp_path_factory.mktemp("environments")
    wheels = root / "wheels"
    make_wheel(wheels, "thepkg", "1.0")
    make_wheel(wheels, "other", "2.0")
    running = Cluster(root)
    running.uv_env = {"UV_FIND_LINKS": str(wheels), "UV_NO_INDEX": "1", "UV_CACHE_DIR": str(root / "uv-cache")}
    running.start_controller()
    running.start_worker("w1", env=running.uv_env)
    yield running
    running.stop()


def corral(cluster: Cluster, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CORRAL_URL": cluster.url, "CORRAL_TOKEN": cluster.admin_token}
    return subprocess.run([sys.executable, "-m", "corral", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def world(cluster: Cluster, job_id: int) -> dict:
    [task] = cluster.tasks(job_id)
    return task["attempts"][-1]["world"]


def build_log(cluster: Cluster, job_id: int) -> str:
    return cluster.logs(job_id, stream="build")


def test_two_jobs_with_the_same_set_share_one_build_and_another_set_builds_another(cluster):
    first = cluster.submit(command=IMPORT, pip=["thepkg==1.0"])
    assert cluster.wait_end(first, timeout=120)["state"] == "SUCCEEDED"
    second = cluster.submit(command=IMPORT, pip=["thepkg==1.0"])
    assert cluster.wait_end(second, timeout=120)["state"] == "SUCCEEDED"
    built, shared = world(cluster, first), world(cluster, second)
    assert built["env_key"] == shared["env_key"]
    assert (built["env_cached"], shared["env_cached"]) == (False, True)
    assert built["env_seconds"] > 0
    assert "thepkg==1.0" in build_log(cluster, first) and build_log(cluster, second) == ""  # one build, one log
    version, prefix = cluster.logs(second).split()
    assert version == "1.0" and prefix.endswith(f"environments/{built['env_key']}")

    different = cluster.submit(command=["python", "-c", "import other, thepkg"], pip=["thepkg==1.0", "other"])
    assert cluster.wait_end(different, timeout=120)["state"] == "SUCCEEDED"
    assert world(cluster, different)["env_key"] != built["env_key"]
    assert world(cluster, different)["env_cached"] is False

    info = corral(cluster, "info", str(second))
    assert info.returncode == 0, info.stderr
    assert f"{built['env_key'][:12]} cached" in info.stdout and "thepkg==1.0" in info.stdout
    assert f"{built['env_key'][:12]} built in" in corral(cluster, "info", str(first)).stdout
    assert corral(cluster, "logs", str(first), "--build").stdout == build_log(cluster, first)

    [worker] = cluster.get("/api/v1/workers")
    keys = {environment["key"] for environment in worker["environments"]}
    assert {built["env_key"], world(cluster, different)["env_key"]} <= keys
    assert OWN_PYTHON in {".".join(version.split(".")[:2]) for version in worker["pythons"]}
    listing = corral(cluster, "workers")
    assert f"{len(keys)} (" in listing.stdout


def test_a_requirement_that_does_not_resolve_fails_once_with_its_cause_and_is_not_retried(cluster):
    job_id = cluster.submit(command=IMPORT, pip=["nosuchpkg"], max_retries_failure=3,
                            retry_policy={"max_retries": 2, "retry_delay": 1})
    job = cluster.wait_end(job_id, timeout=120)
    assert job["state"] == "FAILED"
    [task] = cluster.tasks(job_id)
    assert len(task["attempts"]) == 1  # the failure budget is not spent on the same inputs
    assert task["reason"].startswith("environment build failed: ") and "nosuchpkg" in task["reason"]
    # The job ends in one engine pass and RetryJobs decides in a later one: until then it is still armed.
    job = wait_for(lambda: (j := cluster.job(job_id))["retry_state"] not in (None, "armed") and j, 30,
                   "the retry decision")
    assert job["retry_cause"] == "environment_build_failed" and job["retry_chain"] == [job_id]
    assert "nosuchpkg" in build_log(cluster, job_id)
    info = corral(cluster, "info", str(job_id)).stdout
    assert "environment build failed" in info and "nosuchpkg" in info


def test_a_function_job_with_pip_runs_in_its_environment(cluster):
    def version() -> str:
        import thepkg

        return thepkg.VERSION

    with Client(cluster.url, cluster.admin_token) as client:
        job = client.submit(version, pip=["thepkg"])
        assert job.result(timeout=120) == "1.0"
    assert world(cluster, job.id)["env_key"]


def test_a_job_on_the_worker_s_python_runs_and_one_no_worker_has_waits_naming_it(cluster):
    job_id = cluster.submit(command=["python", "-c", "import sys; print(sys.version_info[:2])"], python=OWN_PYTHON)
    assert cluster.wait_end(job_id, timeout=120)["state"] == "SUCCEEDED"
    assert cluster.logs(job_id).strip() == str(sys.version_info[:2])

    [worker] = cluster.get("/api/v1/workers")
    missing = next(f"3.{minor}" for minor in range(13, 20)
                   if not any(v.startswith(f"3.{minor}.") for v in worker["pythons"]))
    waiting = cluster.submit(command=["true"], python=missing)
    job = wait_for(lambda: (j := cluster.job(waiting))["pending_reason"] and j, 30, "a pending reason")
    assert job["pending_reason"].startswith(f"no worker in pool default has python {missing}")
    cluster.http.post(f"/api/v1/jobs/{waiting}/cancel").raise_for_status()


def test_a_python_no_worker_could_ever_run_and_a_path_outside_the_workdir_are_refused(cluster):
    refused = cluster.http.post("/api/v1/jobs", json={"command": ["true"], "python": "2.7"})
    assert refused.status_code == 422 and "python 2.7" in refused.text
    outside = cluster.http.post("/api/v1/jobs", json={"command": ["true"], "pip": ["../wheels/x.whl"]})
    assert outside.status_code == 422 and "../wheels/x.whl" in outside.text
    cli = corral(cluster, "submit", "--python", "2.7", "--", "true")
    assert cli.returncode != 0 and "python 2.7" in cli.stderr and "Traceback" not in cli.stderr
    cli = corral(cluster, "submit", "--pip", "/opt/x.whl", "--", "true")
    assert cli.returncode != 0 and "/opt/x.whl" in cli.stderr and "Traceback" not in cli.stderr


def test_a_restarted_worker_keeps_its_environments(cluster):
    first = cluster.submit(command=IMPORT, pip=["other==2.0", "thepkg"])
    assert cluster.wait_end(first, timeout=120)["state"] == "SUCCEEDED"
    cluster.kill(cluster.workers.pop("w1"), sig=15)
    # The same work directory under a new name and label, so the job cannot be placed on the stopped worker's row.
    cluster.start_worker("w1-again", 4, "--work-dir", str(cluster.root / "w1"), "--label", "restarted=yes",
                         env=cluster.uv_env)
    again = cluster.submit(command=IMPORT, pip=["other==2.0", "thepkg"], constraints=["restarted=yes"])
    assert cluster.wait_end(again, timeout=120)["state"] == "SUCCEEDED"
    assert world(cluster, again)["env_key"] == world(cluster, first)["env_key"]
    assert world(cluster, again)["env_cached"] is True
    restarted = next(w for w in cluster.get("/api/v1/workers") if w["name"] == "w1-again")
    assert world(cluster, first)["env_key"] in {e["key"] for e in restarted["environments"]}
