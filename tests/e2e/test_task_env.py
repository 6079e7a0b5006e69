"""A task's environment as users expect it: `--export` copies the submitter's variables, and nothing else of
the submitter's environment reaches the task unasked."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e

PRINT = ["sh", "-c", 'echo "tag=${SUBMITTERS_TAG-unset} mode=${SUBMITTERS_MODE-unset} token=${CORRAL_TOKEN%%.*}"']


def submit(cluster, tmp_path, *args: str) -> int:
    """`corral submit` typed in a shell whose environment has variables the workers do not."""
    env = {**os.environ, "CORRAL_URL": cluster.url, "CORRAL_TOKEN": cluster.admin_token,
           "SUBMITTERS_TAG": "from the submitter", "SUBMITTERS_MODE": "offline"}
    done = subprocess.run([sys.executable, "-m", "corral", "submit", *args, "--", *PRINT], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def test_exported_variables_reach_the_task_and_others_do_not(module_cluster, tmp_path):
    jobs = {selection: submit(module_cluster, tmp_path, "--export", selection)
            for selection in ("NONE", "SUBMITTERS_TAG", "ALL")}
    lines = {}
    for selection, job in jobs.items():
        assert module_cluster.wait_end(job, timeout=60)["state"] == "SUCCEEDED"
        lines[selection] = module_cluster.logs(job).strip()
    assert lines["NONE"].startswith("tag=unset mode=unset")
    assert lines["SUBMITTERS_TAG"].startswith("tag=from the submitter mode=unset")
    assert lines["ALL"].startswith("tag=from the submitter mode=offline")
    # ALL never carries the submitter's own token: the task has its job's
    assert all(module_cluster.admin_token.split(".")[0] not in line for line in lines.values())
    assert module_cluster.job(jobs["ALL"])["spec"]["export"]["SUBMITTERS_MODE"] == "offline"
