"""`corral up` and `corral down` as a user runs them: what a task can reach, one controller per data
directory, and nothing left running after `kill -9` of `corral up`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import httpx
import psutil
import pytest

from corral.cli.up import wait_gone
from tests.e2e.cluster import Cluster, free_port
from tests.waiting import wait_for

# Everything a task could try to find a token with: cluster.json and the other files of the data
# directory at every ancestor of its working directory (relative and absolute paths), its
# environment, and the command line and environment of every process above it.
PROBE = r"""
import os, pathlib
tried = []
def read(path):
    try:
        tried.append(f"{path}: {pathlib.Path(path).read_bytes()!r}")
    except OSError as error:
        tried.append(f"{path}: {type(error).__name__}")
here = pathlib.Path.cwd()
for depth, ancestor in enumerate(here.parents, start=1):
    for name in ("cluster.json", "tokens.json", "controller.lock", "up.json"):
        read("/".join([".."] * depth + [name]))
        read(ancestor / name)
tried.append(f"environment: {dict(os.environ)!r}")
pid = os.getppid()
while pid > 1:
    read(f"/proc/{pid}/cmdline")
    read(f"/proc/{pid}/environ")
    pid = int(pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
print("\n".join(tried))
"""


class LocalCluster(Cluster):
    """A cluster started by `corral up` (its process is `controller` here), with `workers` workers."""

    def start_up(self, workers: int = 1, **env: str) -> None:
        self.controller = self._spawn("up", "up", "--workers", str(workers), "--port", str(self.port),
                                      "--data-dir", str(self.data_dir), "--worker-cpus", "2", env=env)
        wait_for(self._healthy, 60, "corral up's controller to answer /healthz")
        tokens = wait_for(self._tokens, 30, "cluster.json")
        self.admin_token, self.join_token = tokens["admin_token"], tokens["join_token"]
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.admin_token}"},
                                 timeout=30)
        wait_for(lambda: sum(w["state"] == "ALIVE" for w in self.get("/api/v1/workers")) == workers, 60,
                 "corral up's workers to register")

    def _tokens(self) -> dict | None:
        try:
            return json.loads((self.data_dir / "cluster.json").read_text())
        except (OSError, ValueError):
            return None

    def corral(self, *args: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "corral", *args], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "CORRAL_DATA_DIR": str(self.data_dir), **env})


@pytest.fixture
def local_cluster(tmp_path):
    running = LocalCluster(tmp_path)
    running.start_up()
    yield running
    running.stop()


def test_a_task_finds_no_token_in_its_paths_environment_or_parents(local_cluster):
    secrets = (local_cluster.admin_token, local_cluster.join_token)
    job = local_cluster.submit(command=[sys.executable, "-c", PROBE])
    assert local_cluster.wait_end(job, timeout=60)["state"] == "SUCCEEDED"
    tried = local_cluster.logs(job)
    assert "/cluster.json: FileNotFoundError" in tried and "/proc/" in tried and "CORRAL_TOKEN" in tried
    for secret in secrets:
        assert secret not in tried
    up = psutil.Process(local_cluster.controller.pid)
    command_lines = [" ".join(p.cmdline()) for p in (up, *up.children(recursive=True))]  # what `ps` shows
    assert len(command_lines) >= 3  # up, its controller, its worker
    for secret in secrets:
        assert not any(secret in line for line in command_lines), command_lines


def test_a_task_runs_corral_and_imports_it_even_when_up_was_started_without_it_on_path(tmp_path):
    """`make up` runs .venv/bin/corral from a shell whose PATH may not hold .venv/bin, and may hold another
    Python first: tasks still run this installation's corral and Python."""
    other = tmp_path / "other-bin"
    other.mkdir()
    (other / "python").write_text(f"#!/bin/sh\nexec {sys.base_prefix}/bin/python3 -I \"$@\"\n")  # no corral there
    (other / "python").chmod(0o755)
    cluster = LocalCluster(tmp_path)
    cluster.start_up(PATH=f"{other}:/usr/bin:/bin")
    try:
        script = ('python -c "import corral" && echo weights > state.pt && corral checkpoint save state.pt'
                  ' && cat "$CORRAL_CHECKPOINT_PATH" && corral submit -- echo child')
        job = cluster.submit(command=["sh", "-c", script])
        assert cluster.wait_end(job, timeout=60)["state"] == "SUCCEEDED", cluster.logs(job, stream="stderr")
        weights, child = cluster.logs(job).split()
        assert weights == "weights"
        assert cluster.wait_end(int(child), timeout=60)["state"] == "SUCCEEDED"
        assert cluster.job(int(child))["launched_by"] == job
    finally:
        cluster.stop()


def test_secrets_are_for_their_owner_only(local_cluster):
    data_dir = local_cluster.data_dir
    for path in (data_dir, data_dir / "cluster.json", data_dir / "tokens.json", data_dir / "controller.lock"):
        assert path.stat().st_mode & 0o077 == 0, path


def test_an_explicit_wrong_token_fails_rather_than_the_admin_one_used(local_cluster):
    result = local_cluster.corral("jobs", CORRAL_TOKEN="wrong")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "error: authentication failed: wrong token "
        "(check CORRAL_TOKEN, `corral login`, or the data directory's cluster.json)"]
    assert local_cluster.corral("jobs", CORRAL_TOKEN=local_cluster.admin_token).returncode == 0


def test_a_second_controller_or_up_on_a_live_data_directory_refuses(local_cluster):
    live = local_cluster.controller  # corral up
    controller_pid = next(c.pid for c in psutil.Process(live.pid).children() if "controller" in c.cmdline())
    data_dir = local_cluster.data_dir.resolve()
    expected = (f"error: the data directory {data_dir} is in use by the controller with pid {controller_pid} at "
                f"http://127.0.0.1:{local_cluster.port}: stop it first (corral down --data-dir {data_dir})")
    for command in (["controller", "--data-dir", str(data_dir), "--port", str(free_port())],
                    ["up", "--data-dir", str(data_dir), "--port", str(free_port())]):
        result = local_cluster.corral(*command)
        assert (result.returncode, result.stderr.strip()) == (1, expected), result.stderr
    assert (data_dir / "cluster.json").exists()  # the refused one took nothing from the live one
    assert local_cluster.get("/api/v1/workers")


def test_corral_down_after_kill_9_of_corral_up_leaves_nothing_running(local_cluster):
    job = local_cluster.submit(command=["sleep", "300"])
    local_cluster.wait_state(job, "RUNNING", timeout=60)
    up = psutil.Process(local_cluster.controller.pid)
    cluster = wait_for(lambda: len(found := [up, *up.children(recursive=True)]) >= 4 and found, 30,
                       "up, its controller, its worker and the task to run")
    os.kill(up.pid, signal.SIGKILL)
    result = local_cluster.corral("down", "--data-dir", str(local_cluster.data_dir))
    assert result.returncode == 0, result.stderr
    assert wait_gone(cluster, 30) == []


def test_corral_down_stops_a_running_corral_up_and_returns_once_all_are_gone(local_cluster):
    up = psutil.Process(local_cluster.controller.pid)
    cluster = [up, *up.children(recursive=True)]
    # corral's own processes (up, and its children the controller and workers) are what `corral down` stops; a
    # worker's cgroup warden, and a search for Pythons it may still run (caught between fork and exec, it still
    # shows the worker's command line), end by themselves once their worker is gone.
    daemons = [p for p in [up, *up.children()] if p.cmdline()[1:3] == ["-m", "corral"]]
    result = local_cluster.corral("down", "--data-dir", str(local_cluster.data_dir))
    assert result.returncode == 0, result.stderr
    data_dir = local_cluster.data_dir.resolve()
    assert len(daemons) == 3 and result.stdout.strip() == \
        f"stopped {len(daemons)} process(es) of the cluster on {data_dir}"
    assert wait_gone(daemons, 0) == []
    assert wait_gone([p for p in cluster if p not in daemons], 10) == []
    assert not (data_dir / "cluster.json").exists() and not (data_dir / "up.json").exists()


def test_corral_down_stops_a_controller_found_through_the_lock(bare_cluster):
    controller = psutil.Process(bare_cluster.controller.pid)
    result = subprocess.run([sys.executable, "-m", "corral", "down", "--data-dir", str(bare_cluster.data_dir)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"stopped 1 process(es) of the cluster on {bare_cluster.data_dir.resolve()}"
    assert wait_gone([controller], 30) == []
    assert not (bare_cluster.data_dir / "cluster.json").exists()  # it stopped cleanly, as the lock's holder
