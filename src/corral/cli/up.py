"""`corral up`: a whole local cluster (controller + workers) as child processes, stopped together; `corral down`.

Workers work in `<data-dir>-workers/`, beside the data directory and not in it, so a task
cannot walk up from its working directory to the controller's tokens. The join token reaches
each worker on its stdin, never on a command line or in an environment a task could read.
Every child dies with `corral up` (SIGTERM, through PR_SET_PDEATHSIG), and `up.json` in the data
directory records them all for `corral down`, which stops what a `kill -9` left behind.
"""

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

from corral.cli.common import CliError, parse_pairs
from corral.cli.daemons import (
    GPUS,
    WORKER_TOKEN_VARIABLES,
    cpus_option,
    made_data_dir,
    memory_option,
    open_store_or_fail,
)
from corral.client.discovery import DEFAULT_DATA_DIR
from corral.client.errors import CorralError
from corral.client.http import Client
from corral.core.states import WorkerState
from corral.lifetime import dies_with_parent
from corral.worker.agent import installation_bin

HEALTH_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0


RECORD_FILE = "up.json"  # who `corral up` started: what `corral down` stops


def workers_dir(data_dir: Path) -> Path:
    """Where `corral up` puts its workers' directories: beside the data directory, never inside it."""
    return data_dir.with_name(f"{data_dir.name}-workers")


def child_env() -> dict[str, str]:
    """The user's environment, less any token in it: children get theirs another way, and pass it to no task.

    This installation's bin comes first on PATH, so tasks run `corral` and the `python` that imports corral.
    """
    secrets = {"CORRAL_TOKEN", *WORKER_TOKEN_VARIABLES}
    env = {k: v for k, v in os.environ.items() if k not in secrets}
    path = [installation_bin(), *(p for p in env.get("PATH", os.defpath).split(os.pathsep) if p != installation_bin())]
    return {**env, "PATH": os.pathsep.join(path), "PYTHONUNBUFFERED": "1"}


class Child:
    """One `python -m corral ...` process in its own session, so a Ctrl-C reaches only `corral up`.

    `secret` is written to its stdin (and stdin closed): the one way in that no other process sees.
    """

    def __init__(self, name: str, args: list[str], log: Path, secret: str | None = None) -> None:
        self.name, self.log = name, log
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "corral", *args], stdin=subprocess.PIPE if secret else subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, env=child_env(), start_new_session=True,
                preexec_fn=dies_with_parent(signal.SIGTERM))
        if secret:
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.write(f"{secret}\n".encode())
            self.process.stdin.close()

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
    with Client(url) as client:
        return client.healthy()


class Cluster:
    def __init__(self, data_dir: Path, stop: threading.Event) -> None:
        from corral.controller.settings import private_dir

        self.data_dir, self.stop = data_dir, stop
        private_dir(data_dir)
        self.logs = data_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.controller: Child | None = None
        self.workers: list[Child] = []

    def record(self) -> None:
        """Write up.json: this process and its children, with their start times (a pid alone may be recycled)."""
        from corral.controller.lock import process_started
        from corral.controller.settings import write_private

        def entry(name: str, pid: int) -> dict:
            return {"name": name, "pid": pid, "started": process_started(pid)}

        write_private(self.data_dir / RECORD_FILE, {
            "up": entry("up", os.getpid()),
            "children": [entry(child.name, child.process.pid) for child in self.children()]})

    def forget(self) -> None:
        (self.data_dir / RECORD_FILE).unlink(missing_ok=True)

    def start_controller(self, args: list[str], url: str) -> None:
        self.controller = Child("controller", ["controller", *args], self.logs / "controller.log")
        self.record()
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
        deadline = time.monotonic() + HEALTH_TIMEOUT
        with Client(url, self.token("admin_token"), timeout=2) as client:
            while not self.stop.is_set():
                with contextlib.suppress(CorralError, ValueError):
                    if names <= {w.name for w in client.workers() if w.state == WorkerState.ALIVE}:
                        return
                for child in self.workers:
                    if child.exited() is not None:
                        raise CliError(f"{child.name} exited with code {child.exited()}:\n{child.tail()}")
                if time.monotonic() > deadline:
                    raise CliError(f"workers did not register within {HEALTH_TIMEOUT:.0f}s; see {self.logs}")
                self.stop.wait(0.1)

    def start_worker(self, index: int, args: list[str]) -> None:
        name = f"worker-{index}"
        self.workers.append(Child(name, ["worker", *args, "--name", name, "--token-file", "-",
                                         "--work-dir", str(workers_dir(self.data_dir) / name)],
                                  self.logs / f"{name}.log", secret=self.token("join_token")))
        self.record()

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
    from corral.controller.lock import DataDirInUse, holders

    data_dir = data_dir.resolve()
    url = client_url(host, port)
    live = holders(data_dir)
    if live:
        raise CliError(str(DataDirInUse(data_dir, live, shared=False)))
    if healthy(url):
        raise CliError(f"a controller already answers at {url}: stop it, or choose another --port")
    from corral.controller.settings import ControllerSettings

    open_store_or_fail(ControllerSettings(data_dir=made_data_dir(data_dir), db_url=db_url).database_url)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    cluster = Cluster(data_dir, stop)
    try:
        # A local cluster's webhooks may reach receivers on this machine (a team's controller refuses them).
        controller_args = ["--data-dir", str(data_dir), "--host", host, "--port", str(port),
                           "--notify-allow", "127.0.0.0/8", "--notify-allow", "::1"]
        cluster.start_controller(controller_args + (["--db", db_url] if db_url else []), url)
        if not stop.is_set():
            worker_args = ["--controller", url]
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
            click.echo(f"  logs in {cluster.logs}; Ctrl-C (or `corral down --data-dir {data_dir}`) stops the cluster")
        dead = cluster.watch()
    finally:
        cluster.shutdown()
        cluster.forget()
    if dead is not None:
        raise CliError(f"{dead.name} exited with code {dead.exited()}; stopped the cluster. "
                       f"Last lines of {dead.log}:\n{dead.tail()}")
    click.echo("corral stopped", err=True)
    ctx.exit(0)


def recorded_processes(data_dir: Path) -> tuple[list, list]:
    """The live processes of the data directory's cluster: (`corral up` and its workers, the controller).

    Found through up.json and the data directory's lock; a recorded pid counts only while the
    process that has it started when the record says, so a recycled pid is left alone.
    """
    import psutil

    from corral.controller.lock import holders

    try:
        record = json.loads((data_dir / RECORD_FILE).read_text())
        entries = [record["up"], *record["children"]]
    except (OSError, ValueError, KeyError, TypeError):
        entries = []
    entries += [{"name": "controller", "pid": live.pid, "started": live.started}
                for live in holders(data_dir) if live.pid]
    first, last, seen = [], [], set()
    for entry in entries:
        try:
            process = psutil.Process(int(entry["pid"]))
            if process.pid in seen or process.create_time() != entry["started"] or not running(process):
                continue
        except (psutil.Error, KeyError, TypeError, ValueError):
            continue
        seen.add(process.pid)
        (last if entry["name"] == "controller" else first).append(process)
    return first, last


def running(process) -> bool:
    """Whether `process` still runs: a zombie (killed, waiting for its parent to reap it) does not."""
    import psutil

    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_gone(processes: list, timeout: float) -> list:
    """Those of `processes` still running after `timeout` (sooner once none is)."""
    deadline = time.monotonic() + timeout
    while (alive := [process for process in processes if running(process)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


def terminate(processes: list, timeout: float) -> None:
    """SIGTERM, then SIGKILL whoever is left after `timeout`; returns when all are gone."""
    import psutil

    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    for process in wait_gone(processes, timeout):
        with contextlib.suppress(psutil.Error):
            process.kill()
    if alive := wait_gone(processes, timeout):
        raise CliError(f"processes {', '.join(str(p.pid) for p in alive)} survive SIGKILL")


@click.command()
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), envvar="CORRAL_DATA_DIR",
              default=DEFAULT_DATA_DIR, show_default=True)
@click.option("--timeout", type=click.FloatRange(min=0), default=STOP_TIMEOUT, show_default=True,
              help="Seconds each process has to stop after SIGTERM before SIGKILL.")
def down(data_dir: Path, timeout: float) -> None:
    """Stop the cluster of a data directory: `corral up`, its workers and its controller, and wait for them.

    Every controller that holds the directory is stopped: several may, sharing one PostgreSQL store."""
    data_dir = data_dir.resolve()
    first, last = recorded_processes(data_dir)
    terminate(first, timeout)  # workers before the controller, as `corral up` stops them
    terminate(last, timeout)
    (data_dir / RECORD_FILE).unlink(missing_ok=True)
    stopped = len(first) + len(last)
    click.echo(f"stopped {stopped} process(es) of the cluster on {data_dir}" if stopped
               else f"no corral cluster runs on {data_dir}")
