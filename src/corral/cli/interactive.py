"""`corral shell`, `attach`, `exec` and `port-forward`: a terminal, a process or a port inside a running task,
through the controller's relay (corral.core.relay, corral.client.relay)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import sys
import termios
import time
import tty
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import click
from websockets.exceptions import ConnectionClosed

from corral.cli.common import CliError, client
from corral.cli.submit import build_spec, chosen_workdir, job_options, load_spec_file, ship_workdir, with_shipped
from corral.client.errors import CorralError
from corral.client.http import Client
from corral.client.relay import CHUNK, PortForwarder, Relay, TerminalOutcome, closed_error, run_terminal
from corral.core.relay import CLOSE_CONFLICT, CLOSE_NOT_FOUND, MAX_COLS, MAX_ROWS
from corral.core.spec import DEFAULT_IDLE_TIMEOUT
from corral.core.states import JOB_TERMINAL, JobState, TaskState
from corral.core.views import JobView

# The user's shell when the worker has it, else /bin/sh: $0 is the shell's path.
SHELL_SCRIPT = 'command -v "$0" >/dev/null && exec "$0" || exec /bin/sh'
JUPYTER_SCRIPT = 'exec jupyter lab --no-browser --ip=127.0.0.1 --port="$PORT" --ServerApp.port_retries=0'
JUPYTER_READY_TIMEOUT = 300.0  # how long JupyterLab may take to listen once its task runs
POLL = 0.5
FIRST_POLL = 0.02


def default_command(environ: dict[str, str] | os._Environ = os.environ) -> list[str]:
    return ["/bin/sh", "-c", SHELL_SCRIPT, environ.get("SHELL") or "/bin/sh"]


def task_option(command: Any) -> Any:
    return click.option("--task", "task", type=click.IntRange(min=0), default=0, show_default=True,
                        help="The task's index within its job.")(command)


# local terminal ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def raw_terminal(fd: int) -> Iterator[None]:
    """The local terminal in raw mode (keys go through as typed, Ctrl-C included), restored on every way out."""
    if not os.isatty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd, termios.TCSANOW)  # not the default TCSAFLUSH: keys typed ahead of the attach still count
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def window_size() -> tuple[int, int] | None:
    """(rows, cols) of the local terminal, None when there is none."""
    for stream in (sys.stdout, sys.stdin, sys.stderr):
        try:
            size = os.get_terminal_size(stream.fileno())
        except (OSError, ValueError):
            continue
        return min(max(size.lines, 1), MAX_ROWS), min(max(size.columns, 1), MAX_COLS)
    return None


async def read_keys(fd: int) -> AsyncIterator[bytes]:
    """Bytes from `fd` as they come, until end of file."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes] = asyncio.Queue()

    def readable() -> None:
        try:
            data = os.read(fd, CHUNK)
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(fd)
        queue.put_nowait(data)

    try:
        loop.add_reader(fd, readable)
    except (PermissionError, OSError):  # a regular file cannot be polled: it is all there
        yield await asyncio.to_thread(lambda: os.fdopen(os.dup(fd), "rb").read())
        return
    try:
        while data := await queue.get():
            yield data
    finally:
        loop.remove_reader(fd)


async def window_changes() -> AsyncIterator[tuple[int, int]]:
    """The local terminal's size after each SIGWINCH."""
    loop = asyncio.get_running_loop()
    changed = asyncio.Event()
    loop.add_signal_handler(signal.SIGWINCH, changed.set)
    try:
        while True:
            await changed.wait()
            changed.clear()
            if (size := window_size()) is not None:
                yield size
    finally:
        loop.remove_signal_handler(signal.SIGWINCH)


class StdStream:
    """A binary standard stream: written and flushed at once."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream.buffer if hasattr(stream, "buffer") else stream

    def write(self, data: bytes) -> None:
        self.stream.write(data)

    def flush(self) -> None:
        self.stream.flush()


def note(text: str) -> None:
    """A line for the person, on its own line whether or not the terminal is raw."""
    sys.stderr.write(f"\r\n[corral] {text}\r\n")
    sys.stderr.flush()


def run_local_terminal(opener: contextlib.AbstractAsyncContextManager, *, raw: bool, detach: bool) -> TerminalOutcome:
    """Drive a terminal or exec channel from this process's stdin and stdout: raw mode when asked and stdin is a
    tty, window resizes followed."""
    stdin = sys.stdin.fileno()

    async def session() -> TerminalOutcome:
        async with opener as channel:
            resizes = window_changes() if raw and os.isatty(stdin) else None
            return await run_terminal(channel, read_keys(stdin), StdStream(sys.stdout), StdStream(sys.stderr),
                                      resizes=resizes, on_note=note, detach=detach)

    with raw_terminal(stdin) if raw else contextlib.nullcontext():
        return asyncio.run(session())


def finish(ctx: click.Context, api: Client, job_id: int, task: int, outcome: TerminalOutcome) -> None:
    """Exit as the session ended: the process's code, 0 after a detach (saying how to come back)."""
    if outcome.detached:
        click.echo(f"\ndetached from job {job_id}; `corral attach {job_id}` comes back "
                   f"(it runs until it exits, its idle timeout, or `corral cancel {job_id}`)", err=True)
        ctx.exit(0)
    code = outcome.code
    if code is None:  # the channel closed without an exit message: ask the controller what became of the task
        with contextlib.suppress(CorralError, IndexError):
            code = api.tasks(job_id)[task].exit_code
    ctx.exit(1 if code is None else code)


# waiting for a job -------------------------------------------------------------------------------------------


def wait_running(api: Client, job_id: int, task: int = 0) -> JobView | None:
    """Until the task runs, its job's state and pending reason shown live on one line of stderr; the job when it
    ended before that (a command quicker than the wait), else None. Polled briskly at first, since an idle cluster
    starts a task within tens of milliseconds, then every POLL seconds."""
    live = sys.stderr.isatty()
    shown = ""
    pause = FIRST_POLL
    while True:
        job = api.get(job_id)
        if job.state in JOB_TERMINAL:
            _clear(live, shown)
            return job
        if job.state == JobState.RUNNING:
            tasks = api.tasks(job_id)
            if task < len(tasks) and tasks[task].state == TaskState.RUNNING:
                _clear(live, shown)
                return None
        line = f"job {job_id} {job.state}" + (f": {job.pending_reason}" if job.pending_reason else "")
        if line != shown:
            if live:
                sys.stderr.write(f"\r\033[K{line[:200]}")
                sys.stderr.flush()
            else:
                click.echo(line, err=True)
            shown = line
        time.sleep(pause)
        pause = min(pause * 2, POLL)


def replay_ended(ctx: click.Context, api: Client, job: JobView, task: int) -> None:
    """A terminal whose command exited before anyone attached: what it printed (its log) and its exit code, as if
    watched. One that never ran (cancelled, unschedulable, a failed build) is an error naming why."""
    views = api.tasks(job.id)
    view = views[task] if task < len(views) else None
    if view is None or view.exit_code is None:
        why = (view.reason if view is not None else None) or job.pending_reason
        raise CliError(f"job {job.id} ended {job.state} before its terminal opened" + (f": {why}" if why else ""))
    with contextlib.suppress(CorralError):
        for chunk in api.logs(job.id, task):
            sys.stdout.buffer.write(chunk)
        sys.stdout.flush()
    ctx.exit(view.exit_code)


def _clear(live: bool, shown: str) -> None:
    if live and shown:
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()


# commands ------------------------------------------------------------------------------------------------------


@click.command(context_settings={"allow_interspersed_args": False})
@job_options
@click.option("--idle-timeout", metavar="DURATION",
              help=f"End the job once no client was attached this long (default {DEFAULT_IDLE_TIMEOUT / 3600:g}h).")
@click.option("--jupyter", is_flag=True, help="Run JupyterLab in the task (installed there, e.g. --pip jupyterlab) "
                                              "and forward a local port to it.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def shell(ctx: click.Context, spec_file: Path | None, env: dict, labels: dict, custom: dict, workdir: Path | None,
          no_workdir: bool, idle_timeout: str | None, jupyter: bool, command: tuple[str, ...],
          **options: Any) -> None:
    """Run an interactive job and attach its terminal: corral shell [OPTIONS] [-- COMMAND]

    Without COMMAND, your $SHELL (or /bin/sh where the worker lacks it). Detach with Ctrl-P Ctrl-Q; the job
    ends when its command exits, at --time-limit, or after --idle-timeout with no client attached."""
    file_data, file_workdir = load_spec_file(spec_file) if spec_file else ({}, None)
    if jupyter and command:
        raise click.UsageError("--jupyter runs JupyterLab: give no command with it")
    fields: dict[str, Any] = {**file_data, "interactive": True}
    if idle_timeout is not None:
        fields["idle_timeout"] = idle_timeout
    token = secrets.token_urlsafe(24)
    if jupyter:
        fields["allocate_port"] = True
        env = {**env, "JUPYTER_TOKEN": token}
        command = ("/bin/sh", "-c", JUPYTER_SCRIPT)
    elif not command and not file_data.get("command"):
        command = tuple(default_command())
    spec = build_spec(fields, command=command, env=env, labels=labels, custom=custom, environ=os.environ, **options)
    directory = chosen_workdir(workdir, no_workdir, file_workdir)
    api = client(ctx)
    if directory is not None:
        spec = with_shipped(spec, ship_workdir(api, directory, spec.pool))
    job = api.submit(spec)
    try:
        ended = wait_running(api, job.id)
    except KeyboardInterrupt:
        api.cancel(job.id)
        click.echo(f"\ncancelled job {job.id} before it started", err=True)
        ctx.exit(130)
    if ended is not None:
        replay_ended(ctx, api, ended, 0)
    if jupyter:
        serve_jupyter(api, job.id, token)
        return
    try:
        outcome = run_local_terminal(api.relay.terminal(job.id, 0, size=window_size()), raw=True, detach=True)
    except CorralError as refused:  # it ended between the wait and the attach: as if it had ended before
        if refused.status != CLOSE_CONFLICT or (ended := api.get(job.id)).state not in JOB_TERMINAL:
            raise
        replay_ended(ctx, api, ended, 0)
    finish(ctx, api, job.id, 0, outcome)


@click.command()
@click.argument("job_id", type=int, metavar="JOB")
@task_option
@click.option("--watch", is_flag=True, help="Only watch: your keys do not reach the terminal.")
@click.pass_context
def attach(ctx: click.Context, job_id: int, task: int, watch: bool) -> None:
    """Attach to an interactive job's terminal again (--watch: only watch). Detach with Ctrl-P Ctrl-Q."""
    api = client(ctx)
    outcome = run_local_terminal(api.relay.terminal(job_id, task, watch=watch, size=window_size()), raw=True,
                                 detach=True)
    finish(ctx, api, job_id, task, outcome)


@click.command("exec")
@click.argument("job_id", type=int, metavar="JOB")
@task_option
@click.option("-t/-T", "--tty/--no-tty", "use_tty", default=None,
              help="Run it on a terminal of its own (default: when this stdin is a terminal).")
@click.option("--detach", is_flag=True, help="Start it and return; its output goes to the task's logs.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def exec_command(ctx: click.Context, job_id: int, task: int, use_tty: bool | None, detach: bool,
                 command: tuple[str, ...]) -> None:
    """Run a command inside a running task (its directory, environment and devices): corral exec JOB -- CMD..."""
    api = client(ctx)
    use_tty = sys.stdin.isatty() if use_tty is None else use_tty
    channel = api.relay.exec(job_id, command, task, tty=use_tty, detach=detach,
                             size=window_size() if use_tty else None)
    if detach:
        asyncio.run(_open_and_close(channel))
        click.echo(f"started in job {job_id} task {task}; its output goes to the task's logs", err=True)
        return
    outcome = run_local_terminal(channel, raw=use_tty, detach=False)
    ctx.exit(1 if outcome.code is None else outcome.code)


async def _open_and_close(channel: contextlib.AbstractAsyncContextManager) -> None:
    """A detached exec: the worker starts the process and closes the channel; a refusal is raised."""
    async with channel as connection:
        await run_terminal(connection, None, StdStream(sys.stdout), StdStream(sys.stderr), on_note=note)


def parse_port_spec(ctx: click.Context | None, param: click.Parameter | None, value: str) -> tuple[int, int]:
    """Click callback: "8888" -> (0, 8888), any free local port; "9000:8888" -> (9000, 8888)."""
    local, sep, remote = value.rpartition(":")
    try:
        ports = (int(local) if sep else 0, int(remote))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not [LOCAL:]REMOTE, e.g. 8888 or 9000:8888", ctx=ctx,
                                 param=param) from None
    if not 0 <= ports[0] <= 65535 or not 1 <= ports[1] <= 65535:
        raise click.BadParameter(f"{value!r}: ports are 1-65535 (LOCAL 0: any free port)", ctx=ctx, param=param)
    return ports


@click.command("port-forward")
@click.argument("job_id", type=int, metavar="JOB")
@click.argument("ports", metavar="[LOCAL:]REMOTE", callback=parse_port_spec)
@task_option
@click.option("--address", default="127.0.0.1", show_default=True, help="The local address to listen on.")
@click.pass_context
def port_forward(ctx: click.Context, job_id: int, ports: tuple[int, int], task: int, address: str) -> None:
    """Forward a local port to a port a task listens on (each connection through the controller), until Ctrl-C."""
    api = client(ctx)
    require_running(api, job_id, task)
    local, remote = ports
    forwarder = PortForwarder(api.relay, job_id, remote, task=task, address=address, local_port=local,
                              on_error=lambda error: click.echo(f"error: connection refused: {error}", err=True))

    def bound(host: str, port: int) -> None:
        click.echo(f"forwarding {host}:{port} -> job {job_id} task {task} port {remote} (Ctrl-C stops)")

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(forwarder, bound))


async def serve(forwarder: PortForwarder, on_bound: Any) -> None:
    async with forwarder:
        on_bound(*forwarder.bound)
        await asyncio.Event().wait()


def require_running(api: Client, job_id: int, task: int) -> None:
    """Fail early, with the task's state, when the task is not running."""
    tasks = api.tasks(job_id)
    if task >= len(tasks):
        raise CliError(f"job {job_id} has no task {task} (it has {len(tasks)})")
    if tasks[task].state != TaskState.RUNNING:
        raise CliError(f"job {job_id} task {task} is {tasks[task].state}, not RUNNING")


def serve_jupyter(api: Client, job_id: int, token: str) -> None:
    """Find JupyterLab's port (the task's $PORT), forward a local port to it once it listens, print its URL."""
    result = api.exec(job_id, ["/bin/sh", "-c", 'printf %s "$PORT"'])
    try:
        remote = int(result.stdout.decode().strip())
    except ValueError:
        raise CliError(f"job {job_id} was given no port ($PORT is {result.stdout!r})") from None
    forwarder = PortForwarder(api.relay, job_id, remote,
                              on_error=lambda error: click.echo(f"error: connection refused: {error}", err=True))

    def bound(host: str, port: int) -> None:
        click.echo(f"http://{host}:{port}/lab?token={token}")
        click.echo(f"forwarding until Ctrl-C; job {job_id} keeps running until its idle timeout or "
                   f"`corral cancel {job_id}`", err=True)

    async def ready_then_serve() -> None:
        click.echo(f"waiting for JupyterLab to listen in job {job_id}...", err=True)
        await wait_listening(api.relay, job_id, remote)
        await serve(forwarder, bound)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(ready_then_serve())


async def wait_listening(relay: Relay, job_id: int, port: int, timeout: float = JUPYTER_READY_TIMEOUT) -> None:
    """Until an HTTP request through a port channel gets an answer."""
    deadline = time.monotonic() + timeout
    last: CorralError | None = None
    while time.monotonic() < deadline:
        try:
            async with relay.port(job_id, port) as channel:
                await channel.send(b"GET /api HTTP/1.0\r\n\r\n")
                async with asyncio.timeout(10):
                    async for message in channel:
                        if isinstance(message, bytes) and message:
                            return
        except ConnectionClosed as closed:
            last = closed_error(closed) or last
        except TimeoutError:
            pass
        except CorralError as error:
            if error.status == CLOSE_NOT_FOUND:
                raise
            last = error
        await asyncio.sleep(1)
    raise CliError(f"JupyterLab did not answer within {timeout:g}s" + (f": {last}" if last else "")
                   + f"; is it installed in the task (--pip jupyterlab)? `corral attach {job_id}` shows its output")
