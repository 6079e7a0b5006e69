"""`corral up`: a whole local cluster (controller + workers) as child processes, stopped together."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import click
import httpx

from corral.cli.common import CliError, parse_pairs
from corral.cli.daemons import GPUS, cpus_option, memory_option
from corral.client.discovery import DEFAULT_DATA_DIR

HEALTH_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0


class Child:
    """One `python -m corral ...` process in its own session, so a Ctrl-C reaches only `corral up`."""

    def __init__(self, name: str, args: list[str], log: Path) -> None:
        self.name, self.log = name, log
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "corral", *args], stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)

    def exited(self) -> int | None:
        return self.process.poll()

    def signal(self, sig: int) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def stop_all(children: list[Child], timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM, then SIGKILL whoever is left after `timeout`."""
    for child in children:
        child.signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for child in children:
        try:
            child.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.signal(signal.SIGKILL)
            child.process.wait()


def client_url(host: str, port: int) -> str:
    """A wildcard bind address is not one to connect to."""
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '::', '') else host}:{port}"


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


class Cluster:
    def __init__(self, data_dir: Path, stop: threading.Event) -> None:
        self.data_dir, self.stop = data_dir, stop
        self.logs = data_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.controller: Child | None = None
        self.workers: list[Child] = []

    def start_controller(self, args: list[str], url: str) -> None:
        self.controller = Child("controller", ["controller", *args], self.logs / "controller.log")
        deadline = time.monotonic() + HEALTH_TIMEOUT
        while not healthy(url):
            if self.stop.is_set():
                return
            if self.controller.exited() is not None:
                raise CliError(f"the controller exited with code {self.controller.exited()}:\n"
                               f"{self.controller.tail()}")
            if time.monotonic() > deadline:
                raise CliError(f"the controller did not answer {url}/healthz within {HEALTH_TIMEOUT:.0f}s "
                               f"(log: {self.controller.log}):\n{self.controller.tail()}")
            self.stop.wait(0.1)

    def token(self, kind: str) -> str:
        path = self.data_dir / "cluster.json"
        try:
            return json.loads(path.read_text())[kind]
        except (OSError, ValueError, KeyError) as error:
            raise CliError(f"the controller is up but {path} has no {kind}: {error!r}") from None

    def wait_for_workers(self, url: str) -> None:
        """Announce the cluster only once every worker has registered, so a first job finds room."""
        names = {child.name for child in self.workers}
        headers = {"Authorization": f"Bearer {self.token('admin_token')}"}
        deadline = time.monotonic() + HEALTH_TIMEOUT
        while not self.stop.is_set():
            with contextlib.suppress(httpx.HTTPError, ValueError):
                alive = {w["name"] for w in httpx.get(f"{url}/api/v1/workers", headers=headers, timeout=2).json()
                         if w["state"] == "ALIVE"}
                if names <= alive:
                    return
            for child in self.workers:
                if child.exited() is not None:
                    raise CliError(f"{child.name} exited with code {child.exited()}:\n{child.tail()}")
            if time.monotonic() > deadline:
                raise CliError(f"workers did not register within {HEALTH_TIMEOUT:.0f}s; see {self.logs}")
            self.stop.wait(0.1)

    def start_worker(self, index: int, args: list[str]) -> None:
        name = f"worker-{index}"
        self.workers.append(Child(name, ["worker", *args, "--name", name,
                                         "--work-dir", str(self.data_dir / "workers" / name)],
                                  self.logs / f"{name}.log"))

    def children(self) -> list[Child]:
        return [*self.workers, *([self.controller] if self.controller else [])]

    def watch(self) -> Child | None:
        """Until a signal (None) or until a child dies (that child)."""
        while not self.stop.wait(0.5):
            for child in self.children():
                if child.exited() is not None:
                    return child
        return None

    def shutdown(self) -> None:
        """Workers first, so they stop their tasks while the controller can still hear about it."""
        stop_all(self.workers)
        if self.controller is not None:
            stop_all([self.controller])


@click.command()
@click.option("--workers", "n_workers", type=click.IntRange(min=0), default=2, show_default=True)
@click.option("--port", type=click.IntRange(1, 65535), default=8265, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_DATA_DIR,
              show_default=True)
@click.option("--worker-cpus", type=float, callback=cpus_option, help="Cores each worker offers.")
@click.option("--worker-memory", callback=memory_option, help="Memory each worker offers, e.g. 8G.")
@click.option("--worker-gpus", type=GPUS, help="GPUs each worker offers (default: detected).")
@click.option("--worker-gpu-memory", callback=memory_option,
              help="Memory of each virtual GPU that --worker-gpus adds, e.g. 24G (default: unknown).")
@click.option("--worker-label", "worker_labels", multiple=True, callback=parse_pairs, metavar="K=V",
              help="A label every worker carries, e.g. gpu=h100 (repeatable).")
@click.option("--db", "db_url", help="SQLAlchemy URL of the store (default: SQLite in the data directory).")
@click.pass_context
def up(ctx: click.Context, n_workers: int, port: int, host: str, data_dir: Path, worker_cpus: float | None,
       worker_memory: int | None, worker_gpus: int | None, worker_gpu_memory: int | None,
       worker_labels: dict[str, str], db_url: str | None) -> None:
    """Start a local cluster: a controller and N workers, until Ctrl-C."""
    if worker_gpu_memory is not None and worker_gpus is None:
        raise click.UsageError("--worker-gpu-memory sets the memory of virtual GPUs: give --worker-gpus too")
    data_dir = data_dir.resolve()
    url = client_url(host, port)
    if healthy(url):
        raise CliError(f"a controller already answers at {url}: stop it, or choose another --port")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    cluster = Cluster(data_dir, stop)
    try:
        controller_args = ["--data-dir", str(data_dir), "--host", host, "--port", str(port)]
        cluster.start_controller(controller_args + (["--db", db_url] if db_url else []), url)
        if not stop.is_set():
            worker_args = ["--controller", url, "--token", cluster.token("join_token")]
            worker_args += ["--cpus", str(worker_cpus)] if worker_cpus else []
            worker_args += ["--memory", str(worker_memory)] if worker_memory else []
            worker_args += ["--gpus", str(worker_gpus)] if worker_gpus is not None else []
            worker_args += ["--gpu-memory", str(worker_gpu_memory)] if worker_gpu_memory else []
            worker_args += [arg for key, value in worker_labels.items() for arg in ("--label", f"{key}={value}")]
            for index in range(1, n_workers + 1):
                cluster.start_worker(index, worker_args)
            cluster.wait_for_workers(url)
        if not stop.is_set():
            click.echo(f"corral is up: dashboard and API at {url}")
            click.echo(f"  export CORRAL_DATA_DIR={data_dir}   # then try: corral submit -- echo hello")
            click.echo(f"  logs in {cluster.logs}; Ctrl-C stops the cluster")
        dead = cluster.watch()
    finally:
        cluster.shutdown()
    if dead is not None:
        raise CliError(f"{dead.name} exited with code {dead.exited()}; stopped the cluster. "
                       f"Last lines of {dead.log}:\n{dead.tail()}")
    click.echo("corral stopped", err=True)
    ctx.exit(0)
