"""End to end: one job cannot stop the cluster for the others, and a task's children stay within its bounds."""

from __future__ import annotations

import json
import sqlite3
import sys
import textwrap
import time

import pytest

from tests.waiting import wait_for

pytestmark = pytest.mark.e2e
PY = sys.executable


def poison(cluster, job_id: int, **spec) -> None:
    """Write spec fields the API refuses today straight into the store, as rows from before the check hold them."""
    with sqlite3.connect(cluster.data_dir / "corral.db") as db:
        (stored,) = db.execute("SELECT spec FROM jobs WHERE id = ?", (job_id,)).fetchone()
        db.execute("UPDATE jobs SET spec = ? WHERE id = ?", (json.dumps({**json.loads(stored), **spec}), job_id))


def stored_job(cluster, job_id: int) -> tuple[str, list[str]]:
    """The state and history messages of a job, read from the store (its spec no longer reads as a JobSpec)."""
    with sqlite3.connect(cluster.data_dir / "corral.db") as db:
        (state,) = db.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
        messages = [m for (m,) in db.execute("SELECT message FROM history WHERE job_id = ? ORDER BY id", (job_id,))]
    return state, messages


def test_poison_jobs_from_before_the_checks_do_not_hold_back_a_normal_one_across_a_restart(bare_cluster):
    refused = bare_cluster.http.post("/api/v1/jobs", json={"command": ["true"], "begin": 1e20})
    assert refused.status_code == 422 and "must lie between 2000-01-01" in refused.text
    far = bare_cluster.submit(command=["true"], begin=time.time() + 3600)
    broken = bare_cluster.submit(command=["true"], begin=time.time() + 3600)
    bare_cluster.kill(bare_cluster.controller)
    poison(bare_cluster, far, begin=1e20)  # what `corral submit --begin 1e20` stored before the check
    poison(bare_cluster, broken, begin="tomorrow")  # a value the scheduler itself cannot compare with a time
    bare_cluster.start_controller()
    bare_cluster.start_worker("w1")
    normal = bare_cluster.submit(command=["echo", "hello"])
    assert bare_cluster.wait_end(normal)["state"] == "SUCCEEDED"
    assert bare_cluster.logs(normal) == "hello\n"
    assert bare_cluster.job(far)["pending_reason"] == "not before 1e+20 (unix seconds)"
    state, messages = wait_for(lambda: (s := stored_job(bare_cluster, broken))[0] == "FAILED" and s, 30,
                               "the broken job to be given up")
    assert any(m and m.startswith("ScheduleJobs failed on it 3 runs in a row (TypeError: ")
               for m in messages), messages
    metrics = bare_cluster.http.get("/metrics").text
    assert 'corral_handler_target_errors_total{handler="ScheduleJobs"} 3.0' in metrics


CHILDREN = textwrap.dedent("""
    import json, os, urllib.error, urllib.request

    def submit(**spec):
        request = urllib.request.Request(
            os.environ["CORRAL_URL"] + "/api/v1/jobs", json.dumps({"command": ["true"], **spec}).encode(),
            {"Authorization": "Bearer " + os.environ["CORRAL_TOKEN"], "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request) as response:
                body = json.load(response)
                print(response.status, body["priority"], body["spec"]["project"])
        except urllib.error.HTTPError as error:
            print(error.code, json.load(error)["detail"])

    submit(priority="critical", project="other")
    submit(priority="critical")
    submit(project="other")
    submit(priority="low")
    submit()
""")


def test_a_task_cannot_launch_children_above_its_priority_or_in_another_project(cluster):
    driver = cluster.submit(command=[PY, "-c", CHILDREN], project="ml", priority="high")
    assert cluster.wait_end(driver)["state"] == "SUCCEEDED"
    assert cluster.logs(driver).splitlines() == [
        f"403 job {driver} runs in project ml: the jobs it launches run there too, not in project other",
        f"403 job {driver} runs at priority 100 (high): the jobs it launches may ask for that or less, "
        "not 1000 (critical)",
        f"403 job {driver} runs in project ml: the jobs it launches run there too, not in project other",
        "201 -100 ml",
        "201 100 ml",
    ]
    children = cluster.get("/api/v1/jobs", launched_by=driver)["items"]
    assert sorted((c["priority"], c["spec"]["project"]) for c in children) == [(-100, "ml"), (100, "ml")]
