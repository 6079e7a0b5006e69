"""A real local cluster for end-to-end tests: a controller process and worker processes.

Everything is started as the user would (`python -m corral controller|worker`), talks over
real HTTP, and is waited on by condition with a deadline, never by a fixed sleep.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from corral.core.states import JOB_TERMINAL
from tests.waiting import wait_for

STOP_DEADLINE = 30.0  # seconds each process has to exit after SIGTERM before it is killed


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Cluster:
    """A controller and workers as real processes. A worker is declared lost after 8 s of silence: short enough
    for the tests that kill one, long enough that a worker starved of CPU on a loaded machine is not."""

    def __init__(self, root: Path, *, loss_timeout: float = 8.0, heartbeat_interval: float = 0.5,
                 db_url: str | None = None, controller_args: tuple[str, ...] = ()) -> None:
        self.root = root
        self.db_url = db_url
        self.controller_args = controller_args
        self.data_dir = root / "data"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.loss_timeout = loss_timeout
        self.heartbeat_interval = heartbeat_interval
        self.controller: subprocess.Popen | None = None
        self.workers: dict[str, subprocess.Popen] = {}
        self.http: httpx.Client | None = None

    # processes -------------------------------------------------------------------------

    def _spawn(self, name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        log = (self.root / f"{name}.log").open("ab")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        return subprocess.Popen([sys.executable, "-m", "corral", *args], stdout=log, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)

    def start_controller(self, *extra: str) -> None:
        self.spawn_controller(*extra)
        self.wait_controller()

    def spawn_controller(self, *extra: str) -> None:
        """Start the controller process without waiting for it (several controllers start at once)."""
        self.controller = self._spawn(
            "controller", "controller", "--data-dir", str(self.data_dir), "--port", str(self.port),
            "--loss-timeout", str(self.loss_timeout), "--heartbeat-interval", str(self.heartbeat_interval),
            *(["--db", self.db_url] if self.db_url else []), *self.controller_args, *extra)

    def wait_controller(self) -> None:
        """Until the controller answers /healthz; then its tokens are read and the admin client is made."""
        wait_for(self._healthy, 30, "the controller to answer /healthz")
        tokens = json.loads((self.data_dir / "cluster.json").read_text())
        self.admin_token, self.join_token = tokens["admin_token"], tokens["join_token"]
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.admin_token}"},
                                 timeout=30)

    def _healthy(self) -> bool:
        if self.controller is not None and self.controller.poll() is not None:
            raise AssertionError(f"controller exited: {self.log('controller')}")
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def start_worker(self, name: str, cpus: float = 4, *extra: str, env: dict[str, str] | None = None) -> None:
        self.spawn_worker(name, cpus, *extra, env=env)
        wait_for(lambda: any(w["name"] == name and w["state"] == "ALIVE" for w in self.get("/api/v1/workers")),
                 30, f"worker {name} to register")

    def spawn_worker(self, name: str, cpus: float = 4, *extra: str, env: dict[str, str] | None = None) -> None:
        """Start a worker (work directory ROOT/NAME) without waiting for it to register; `env` adds to its
        environment (its own uv configuration, for instance)."""
        self.workers[name] = self._spawn(
            name, "worker", "--controller", self.url, "--name", name,
            "--work-dir", str(self.root / name), "--cpus", str(cpus), "--memory", "4G",
            "--heartbeat-interval", str(self.heartbeat_interval), *extra,
            env={**(env or {}), "CORRAL_JOIN_TOKEN": self.join_token})

    def kill(self, process: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        os.killpg(process.pid, sig)
        process.wait(timeout=30)

    def stop(self, *, strict: bool = True, deadline: float = STOP_DEADLINE) -> list[str]:
        """SIGTERM each worker, then the controller, each with `deadline` seconds to exit; one that has not is
        killed (SIGKILL to its process group), so nothing outlives the cluster and the admin client is closed
        whatever happens. The names of those killed: with `strict` (the tests) an AssertionError, since a process
        that does not stop on SIGTERM is a defect; without (the benches) said on stderr and returned, so that a
        run's figures are not lost to it."""
        overran = []
        for name, process in [*self.workers.items(), ("controller", self.controller)]:
            if process is None or process.poll() is not None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=deadline)
            except subprocess.TimeoutExpired:
                overran.append(name)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
        if self.http is not None:
            self.http.close()
        if overran:
            said = f"{', '.join(overran)} did not exit within {deadline:g} s of SIGTERM and was killed"
            if strict:
                raise AssertionError(f"{said}; the last of its log: {self.log(overran[-1])}")
            print(f"{said}; the last of its log:\n{self.log(overran[-1])[-1500:]}", file=sys.stderr, flush=True)
        return overran

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    # API -------------------------------------------------------------------------------

    def get(self, path: str, **params):
        response = self.http.get(path, params=params)
        response.raise_for_status()
        return response.json()

    def submit(self, **spec) -> int:
        response = self.http.post("/api/v1/jobs", json=spec)
        assert response.status_code == 201, response.text
        return response.json()["id"]

    def job(self, job_id: int) -> dict:
        return self.get(f"/api/v1/jobs/{job_id}")

    def tasks(self, job_id: int) -> list[dict]:
        return self.get(f"/api/v1/jobs/{job_id}/tasks")

    def wait_state(self, job_id: int, *states: str, timeout: float = 30, every: float = 0.02) -> dict:
        return wait_for(lambda: (j := self.job(job_id))["state"] in states and j, timeout,
                        f"job {job_id} to reach {states}", every)

    def wait_running(self, job_id: int, index: int = 0, timeout: float = 30) -> dict:
        """Until task `index` runs its process: a job is RUNNING as soon as it is placed."""
        return wait_for(lambda: (t := self.tasks(job_id)[index])["state"] == "RUNNING" and t, timeout,
                        f"task {index} of job {job_id} to run")

    def wait_end(self, job_id: int, timeout: float = 30, every: float = 0.02) -> dict:
        """The job's row once it has ended, read every `every` seconds until then."""
        return self.wait_state(job_id, *JOB_TERMINAL, timeout=timeout, every=every)

    def logs(self, job_id: int, task: int = 0, stream: str = "stdout") -> str:
        response = self.http.get(f"/api/v1/jobs/{job_id}/tasks/{task}/logs", params={"stream": stream})
        response.raise_for_status()
        return response.text
