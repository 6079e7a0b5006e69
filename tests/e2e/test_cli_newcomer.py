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


def test_a_bad_spec_is_refused_by_the_controller_in_the_words_of_the_local_check(bare_cluster, tmp_path):
    """`corral submit` sends the spec as written (it loads no model): the controller's 422 becomes the one line
    the local check printed, the field named, and a list's bad job named by its index; nothing is stored."""
    bad = corral(bare_cluster, "submit", "--cpus", "-1", "--time-limit", "soon", "--", "true")
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr == ("error: invalid job spec: resources.cpu: Input should be greater than or equal to 0.01; "
                          "time_limit: not a duration: 'soon' (use seconds or a unit, e.g. 90s, 15m, 2h)\n")
    listed = tmp_path / "jobs.yaml"
    listed.write_text("- {command: [a]}\n- {command: [b], gang: true, replicas: 2, max_running: 1}\n")
    refused = corral(bare_cluster, "submit", "-f", str(listed))
    assert refused.returncode == 1 and refused.stderr == (
        "error: job 1 of the file: max_running is for independent tasks: a gang's tasks all run at once\n")
    assert corral(bare_cluster, "jobs", "--all", "--json").stdout.strip() == "[]"


def test_submit_loads_no_model(cluster, tmp_path):
    """`corral submit --wait` imports neither pydantic nor the spec's models (a fifth of its start went there), nor
    httpx (a plain http:// controller is reached through http.client alone)."""
    script = ("import sys, runpy; sys.argv = ['corral', 'submit', '--wait', '--', 'true']\n"
              "try:\n    runpy.run_module('corral', run_name='__main__')\n"
              "except SystemExit as end:\n"
              "    loaded = [m for m in ('pydantic', 'corral.core.spec', 'corral.core.views', 'httpx')\n"
              "              if m in sys.modules]\n"
              "    print(end.code, loaded)\n")
    env = {**os.environ, "CORRAL_URL": cluster.url, "CORRAL_TOKEN": cluster.admin_token}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60,
                         cwd=tmp_path)
    assert run.stdout.splitlines()[-1] == "0 []", run.stdout + run.stderr
