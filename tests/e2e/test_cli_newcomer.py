"""What a newcomer meets, through the real `corral` command: errors in one line with a non-zero exit, and
listings that say what they leave out."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e


def corral(cluster, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CORRAL_URL": cluster.url, "CORRAL_TOKEN": cluster.admin_token}
    return subprocess.run([sys.executable, "-m", "corral", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def test_logs_of_a_missing_job_task_or_attempt_say_what_is_missing(bare_cluster):
    job = bare_cluster.submit(command=["true"], replicas=2)  # no worker: it waits, attempt 0 not started
    for args, said in [(["99999"], "error: no job 99999"),
                       ([str(job), "--task", "5"], f"error: job {job} has no task 5 (its tasks are 0 to 1)"),
                       ([str(job), "--attempt", "7"],
                        f"error: task 0 of job {job} has no attempt 7 (it has not started an attempt yet)")]:
        run = corral(bare_cluster, "logs", *args)
        assert (run.returncode, run.stdout, run.stderr) == (1, "", said + "\n")


def test_jobs_says_how_many_more_match_than_it_lists(bare_cluster):
    ids = [bare_cluster.submit(command=["true"]) for _ in range(3)]
    run = corral(bare_cluster, "jobs", "--limit", "2", "--json")
    assert run.returncode == 0 and run.stderr == "showing 2 of 3 jobs; --limit N or --all for more\n"
    assert [job["id"] for job in json.loads(run.stdout)] == ids[:0:-1]
    every = corral(bare_cluster, "jobs", "--all", "--json")
    assert [job["id"] for job in json.loads(every.stdout)] == ids[::-1] and every.stderr == ""


def test_submit_wait_ends_with_the_job_and_exits_by_its_state(cluster):
    ok = corral(cluster, "submit", "--wait", "--json", "--", "true")
    view = json.loads(ok.stdout)
    assert ok.returncode == 0 and view["state"] == "SUCCEEDED"
    assert ok.stderr == f"job {view['id']} SUCCEEDED (1 SUCCEEDED)\n"
    failed = corral(cluster, "submit", "--wait", "--", "false")
    assert failed.returncode == 1 and failed.stderr.endswith("FAILED (1 FAILED)\n")
