"""`corral up` as a user runs it: what a task can reach."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import psutil
import pytest

from tests.e2e.cluster import Cluster, wait_for

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

    def start_up(self, workers: int = 1) -> None:
        self.controller = self._spawn("up", "up", "--workers", str(workers), "--port", str(self.port),
                                      "--data-dir", str(self.data_dir), "--worker-cpus", "2")
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


def test_secrets_are_for_their_owner_only(local_cluster):
    data_dir = local_cluster.data_dir
    for path in (data_dir, data_dir / "cluster.json", data_dir / "tokens.json"):
        assert path.stat().st_mode & 0o077 == 0, path


def test_an_explicit_wrong_token_fails_rather_than_the_admin_one_used(local_cluster):
    result = local_cluster.corral("jobs", CORRAL_TOKEN="wrong")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "error: authentication failed: wrong token (check CORRAL_TOKEN, or the data directory's cluster.json)"]
    assert local_cluster.corral("jobs", CORRAL_TOKEN=local_cluster.admin_token).returncode == 0

