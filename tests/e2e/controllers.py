"""Several controllers on one PostgreSQL database, as an operator runs them: real processes sharing the
database and a data directory, each on a port of its own, killed and restarted at will; workers and clients
given every controller's URL.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

from tests.e2e.cluster import free_port
from tests.waiting import wait_for


@contextlib.contextmanager
def in_background(run: Callable[[threading.Event], None]) -> Iterator[None]:
    """`run(done)` in a thread for the block's length: `done` is set when the block ends, and the thread joined."""
    done = threading.Event()
    thread = threading.Thread(target=run, args=(done,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(60)


@contextlib.contextmanager
def requests_through(router_url: str, token: str, counts: Counter, retries: int = 2) -> Iterator[None]:
    """Send requests through the router until the block ends; count answered, retried and lost ones (a request
    still failing after `retries` more tries, 0.2 s apart), and each lost one's last failure ("lost: 503 ...")."""
    def run(done: threading.Event) -> None:
        with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=10) as client:
            while not done.is_set():
                for attempt in range(retries + 1):  # a bounded retry is fine; a request never answered is lost
                    try:
                        response = client.get(f"{router_url}/serve/svc/whoami")
                        if response.status_code == 200:
                            counts["answered"] += 1
                            counts["retried"] += attempt > 0
                            break
                        failure = f"{response.status_code} {response.text[:200]}"
                    except httpx.HTTPError as error:
                        failure = f"{type(error).__name__} {error}"
                    time.sleep(0.2)
                else:
                    counts["lost"] += 1
                    counts[f"lost: {failure}"] += 1
                time.sleep(0.02)

    with in_background(run):
        yield


def router_answers(router_url: str, token: str) -> bool:
    """Whether the router routes to the deployment `svc` (tests/serving_app/server.py) now."""
    try:
        return httpx.get(f"{router_url}/serve/svc/whoami", headers={"Authorization": f"Bearer {token}"},
                         timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


class Controllers:
    """N controllers (numbered from 0) and workers; `url` is every controller's URL, comma-separated."""

    def __init__(self, root: Path, db_url: str, count: int, *, loss_timeout: float = 8.0,
                 heartbeat_interval: float = 0.5) -> None:
        self.root = root
        self.db_url = db_url
        self.data_dir = root / "data"
        self.ports = [free_port() for _ in range(count)]
        self.urls = [f"http://127.0.0.1:{port}" for port in self.ports]
        self.url = ",".join(self.urls)
        self.loss_timeout = loss_timeout
        self.heartbeat_interval = heartbeat_interval
        self.controllers: dict[int, subprocess.Popen] = {}
        self.workers: dict[str, subprocess.Popen] = {}
        self.admin_token = secrets.token_urlsafe(24)
        self.join_token = secrets.token_urlsafe(24)
        # The first controller seeds the store's tokens from here; the others read them from the store.
        self.data_dir.mkdir(mode=0o700, parents=True)
        (self.data_dir / "tokens.json").write_text(json.dumps({"admin": self.admin_token, "join": self.join_token}))
        (self.data_dir / "tokens.json").chmod(0o600)
        self.http = httpx.Client(headers={"Authorization": f"Bearer {self.admin_token}"}, timeout=30)
        self.starts = 0

    def _spawn(self, name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        log = (self.root / f"{name}.log").open("ab")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        return subprocess.Popen([sys.executable, "-m", "corral", *args], stdout=log, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)

    def spawn_controller(self, number: int) -> None:
        """Start controller `number` (again, after a kill) without waiting for it."""
        self.starts += 1
        self.controllers[number] = self._spawn(
            f"controller{number}", "controller", "--data-dir", str(self.data_dir), "--port", str(self.ports[number]),
            "--db", self.db_url, "--loss-timeout", str(self.loss_timeout),
            "--heartbeat-interval", str(self.heartbeat_interval))

    def start_controller(self, number: int) -> None:
        self.spawn_controller(number)
        wait_for(lambda: self.healthy(number), 60, f"controller {number} to answer /healthz")

    def start_all(self) -> None:
        for number in range(len(self.ports)):
            self.spawn_controller(number)
        for number in range(len(self.ports)):
            wait_for(lambda n=number: self.healthy(n), 60, f"controller {number} to answer /healthz")

    def healthy(self, number: int) -> bool:
        process = self.controllers.get(number)
        if process is not None and process.poll() is not None:
            raise AssertionError(f"controller {number} exited: {self.log(f'controller{number}')}")
        try:
            return httpx.get(f"{self.urls[number]}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def kill_controller(self, number: int, sig: int = signal.SIGKILL) -> None:
        process = self.controllers.pop(number)
        os.killpg(process.pid, sig)
        process.wait(timeout=30)

    def live(self) -> list[int]:
        return [n for n, p in self.controllers.items() if p.poll() is None]

    def spawn_worker(self, name: str, cpus: float = 4, *extra: str, urls: list[str] | None = None) -> None:
        """A worker given every controller's URL (in the order `urls`, default: rotated by its number)."""
        order = urls or self.urls[len(self.workers) % len(self.urls):] + self.urls[:len(self.workers) % len(self.urls)]
        self.workers[name] = self._spawn(
            name, "worker", "--controller", ",".join(order), "--name", name,
            "--work-dir", str(self.root / name), "--cpus", str(cpus), "--memory", "4G",
            "--heartbeat-interval", str(self.heartbeat_interval), *extra,
            env={"CORRAL_JOIN_TOKEN": self.join_token})

    def start_worker(self, name: str, cpus: float = 4, *extra: str) -> None:
        self.spawn_worker(name, cpus, *extra)
        wait_for(lambda: any(w["name"] == name and w["state"] == "ALIVE" for w in self.get("/api/v1/workers")),
                 60, f"worker {name} to register")

    def stop(self) -> None:
        for process in [*self.workers.values(), *self.controllers.values()]:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in [*self.workers.values(), *self.controllers.values()]:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        self.http.close()

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # API, through whichever controller answers -----------------------------------------------

    def request(self, method: str, path: str, **kwargs) -> httpx.Response:
        """The first live controller's answer (in order), as a client with every URL does."""
        for url in self.urls:
            try:
                return self.http.request(method, url + path, **kwargs)
            except httpx.TransportError:
                continue
        raise AssertionError(f"no controller answered {method} {path}")

    def get(self, path: str, **params):
        response = self.request("GET", path, params=params)
        response.raise_for_status()
        return response.json()
