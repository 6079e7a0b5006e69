"""The worker's end of a relay channel (corral.core.relay): the WebSocket it dials back for a RelayOrder, and what
it serves on it: an interactive task's terminal, an `exec` in a task's environment, or one TCP connection to a
port a process of the task listens on.

The handlers know their attempt only through `Workplace` (the runner's side), and their socket only through
`terminal.Socket`, so tests drive them with an in-memory pair.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractContextManager, asynccontextmanager
from typing import Protocol
from urllib.parse import quote, urlsplit, urlunsplit

import psutil
from websockets import ConnectionClosed
from websockets.asyncio.client import connect

from corral.core.protocol import API, RelayOrder
from corral.core.relay import (
    CLOSE_CONFLICT,
    CLOSE_NORMAL,
    CLOSE_WORKER_ERROR,
    MAX_FRAME,
    PORT_CHUNK,
    STDERR,
    STDOUT,
    Eof,
    Exit,
    Resize,
)
from corral.worker.spawning import Child
from corral.worker.terminal import (
    CLOSE_BAD_DATA,
    Outbox,
    Socket,
    Terminal,
    close_reason,
    control,
    open_pty,
    read_fd,
    set_window,
    write_fd,
)

HANGUP_GRACE = 2.0  # how long an exec whose client went away has after SIGHUP before SIGKILL, as ssh gives
DRAIN_TIMEOUT = 5.0  # how long an ended exec's output may take to be read (a leftover child may hold its pipes)
CHUNK = 1 << 16


class Workplace(Protocol):
    """What a channel needs of its attempt (the runner's side)."""

    terminal: Terminal | None

    def attached(self, outbox: Outbox | None) -> AbstractContextManager[None]:
        """While a channel is open: the attempt is not idle, and a stop or preemption warns `outbox` first."""

    async def launch(self, command: list[str], stdin: int, stdout: int, stderr: int, tty: bool,
                     name: str) -> Child:
        """Start `command` in the attempt's environment and containment; raises OSError when it cannot start."""

    def signal(self, process: Child, sig: int) -> None:
        """`sig` to every process `launch` started as `process` (not to its shim)."""

    def log_pipes(self) -> tuple[int, int]:
        """Write ends of two pipes whose output is appended to the attempt's stdout and stderr logs."""

    def pids(self) -> list[int]:
        """The attempt's processes now."""


def relay_url(controller_url: str, session: str, worker_id: str) -> str:
    """The WebSocket address of a session's relay on a controller given by its HTTP(S) address."""
    parts = urlsplit(controller_url.rstrip("/"))
    scheme = {"https": "wss", "http": "ws"}.get(parts.scheme, parts.scheme)
    return urlunsplit((scheme, parts.netloc, f"{parts.path}{API}/relay/{quote(session)}",
                       f"worker={quote(worker_id)}", ""))


@asynccontextmanager
async def dial(url: str, token: str) -> AsyncIterator[Socket]:
    """The worker's WebSocket to a relay, authenticated by its join token."""
    async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}, max_size=MAX_FRAME,
                       compression=None) as ws:
        yield ws


async def serve(ws: Socket, order: RelayOrder, place: Workplace) -> None:
    """Serve one channel to its end (the runner has checked the attempt runs)."""
    if order.kind == "terminal":
        terminal = place.terminal
        if terminal is None or terminal.ended:
            await ws.close(CLOSE_CONFLICT, "the task is not interactive: it has no terminal (use exec)")
            return
        outbox = Outbox(ws)
        with place.attached(outbox):
            await terminal.attach(ws, order.watch, order.rows, order.cols, outbox)
    elif order.kind == "exec":
        await _exec(ws, order, place)
    else:
        await _port(ws, order, place)


# exec ----------------------------------------------------------------------------------------

async def _exec(ws: Socket, order: RelayOrder, place: Workplace) -> None:
    if not order.command:
        await ws.close(CLOSE_WORKER_ERROR, "exec needs a command")
        return
    if order.detach:
        await _detached(ws, order, place)
        return
    if order.tty:
        master, slave = open_pty(order.rows, order.cols)
        child_ends, outputs, stdin = [slave], [(master, STDOUT)], master
    else:
        (in_read, in_write), (out_read, out_write), (err_read, err_write) = os.pipe(), os.pipe(), os.pipe()
        child_ends, outputs, stdin = [in_read, out_write, err_write], [(out_read, STDOUT), (err_read, STDERR)], in_write
        for fd in (in_write, out_read, err_read):
            os.set_blocking(fd, False)
    ours = [fd for fd, _ in outputs] + ([] if order.tty else [stdin])
    outbox = Outbox(ws)
    with place.attached(outbox):  # before the process starts: a stop that comes meanwhile warns this client too
        try:
            try:
                process = await place.launch(order.command, *(child_ends * 3 if order.tty else child_ends),
                                             tty=order.tty, name=order.session)
            finally:
                for fd in child_ends:
                    os.close(fd)
        except OSError as error:
            for fd in ours:
                os.close(fd)
            outbox.close(CLOSE_WORKER_ERROR, close_reason(f"cannot start {order.command[0]}: {error}"))
            await outbox.task
            return
        pumps = [asyncio.create_task(_pump(fd, stream, outbox)) for fd, stream in outputs]
        feeding = asyncio.create_task(_feed(ws, outbox, stdin, order.tty, ours))
        waiting = asyncio.create_task(process.wait())
        try:
            await asyncio.wait([feeding, waiting, outbox.task], return_when=asyncio.FIRST_COMPLETED)
            if waiting.done():
                _, late = await asyncio.wait(pumps, timeout=DRAIN_TIMEOUT)
                for task in late:
                    task.cancel()
                outbox.control(Exit(code=_code(process.returncode)))
                outbox.close(CLOSE_NORMAL)
                await asyncio.wait([outbox.task], timeout=DRAIN_TIMEOUT)
            else:  # the client went away (or broke the protocol): hang up, as ssh does
                await _hang_up(process, place)
        finally:
            for task in (feeding, *pumps):
                task.cancel()
            await asyncio.gather(feeding, *pumps, return_exceptions=True)
            for fd in ours:
                with contextlib.suppress(OSError):
                    os.close(fd)


async def _hang_up(process: Child, place: Workplace) -> None:
    """SIGHUP to what the exec started, then SIGKILL once HANGUP_GRACE has passed."""
    place.signal(process, signal.SIGHUP)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(HANGUP_GRACE):
            await process.wait()
        return
    place.signal(process, signal.SIGKILL)
    await process.wait()


async def _pump(fd: int, stream: int, outbox: Outbox) -> None:
    """A process's output to its client, at the client's pace (the process waits on a full pipe meanwhile)."""
    async for data in read_fd(fd):
        outbox.output(data, stream)
        await outbox.room()


async def _feed(ws: Socket, outbox: Outbox, stdin: int, tty: bool, ours: list[int]) -> None:
    """The client's frames to the process: bytes to its stdin, resizes to its terminal, eof closes its stdin (on a
    terminal: Ctrl-D). `ours` holds the descriptors still open."""
    with contextlib.suppress(ConnectionClosed):
        while True:
            frame = await ws.recv()
            if isinstance(frame, bytes):
                if stdin in ours:
                    with contextlib.suppress(OSError):  # the process closed its input, or has ended
                        await write_fd(stdin, frame)
                continue
            message = control(frame)
            if message is None:
                outbox.close(CLOSE_BAD_DATA, "not a control message: resize or eof")
                return
            if isinstance(message, Resize):
                if tty:
                    set_window(stdin, message.rows, message.cols)
            elif tty:
                with contextlib.suppress(OSError):
                    await write_fd(stdin, b"\x04")  # end of input, as a terminal's Ctrl-D
            elif stdin in ours:
                ours.remove(stdin)
                os.close(stdin)


async def _detached(ws: Socket, order: RelayOrder, place: Workplace) -> None:
    stdout, stderr = place.log_pipes()
    stdin = os.open(os.devnull, os.O_RDONLY)
    try:
        process = await place.launch(order.command, stdin, stdout, stderr, tty=False, name=order.session)
    except OSError as error:
        await ws.close(CLOSE_WORKER_ERROR, close_reason(f"cannot start {order.command[0]}: {error}"))
        return
    finally:
        for fd in (stdin, stdout, stderr):
            os.close(fd)
    await ws.send(Exit(code=None, reason=f"started, pid {process.pid}").model_dump_json())
    await ws.close(CLOSE_NORMAL)


def _code(returncode: int | None) -> int | None:
    """A process's returncode as a shell says it: 128+N for a death by signal N."""
    return None if returncode is None else returncode if returncode >= 0 else 128 - returncode


# port ----------------------------------------------------------------------------------------

def listening(pids: Sequence[int]) -> dict[int, str]:
    """The TCP ports the processes `pids` listen on, each with the address it is bound to."""
    ports: dict[int, str] = {}
    for pid in pids:
        try:
            connections = psutil.Process(pid).net_connections(kind="tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        for connection in connections:
            if connection.status == psutil.CONN_LISTEN and connection.laddr:
                ports.setdefault(connection.laddr.port, connection.laddr.ip)
    return ports


def _loopback(address: str) -> str:
    """Where to connect to reach a socket bound to `address`: loopback for a wildcard, the address itself else."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(address, address)


async def _port(ws: Socket, order: RelayOrder, place: Workplace) -> None:
    assert order.port is not None, "a port channel names its port"
    ports = await asyncio.to_thread(listening, place.pids())
    if order.port not in ports:
        held = ", ".join(map(str, sorted(ports))) or "none"
        await ws.close(CLOSE_CONFLICT, close_reason(f"no process of this task listens on port {order.port} "
                                                    f"(it listens on: {held})"))
        return
    try:
        reader, writer = await asyncio.open_connection(_loopback(ports[order.port]), order.port, limit=PORT_CHUNK)
    except OSError as error:
        await ws.close(CLOSE_WORKER_ERROR, close_reason(f"port {order.port}: {error}"))
        return
    with place.attached(None):
        upstream = asyncio.create_task(_upstream(ws, reader))
        downstream = asyncio.create_task(_downstream(ws, writer))
        try:
            done, _ = await asyncio.wait([upstream, downstream], return_when=asyncio.FIRST_EXCEPTION)
            failed = next((task.exception() for task in done if task.exception() is not None), None)
            if failed is None:
                await ws.close(CLOSE_NORMAL)
            elif isinstance(failed, _BadFrame):
                await ws.close(CLOSE_BAD_DATA, str(failed))
            elif not isinstance(failed, ConnectionClosed):
                await ws.close(CLOSE_WORKER_ERROR, close_reason(f"port {order.port}: {failed}"))
        finally:
            for task in (upstream, downstream):
                task.cancel()
            await asyncio.gather(upstream, downstream, return_exceptions=True)
            writer.close()


class _BadFrame(Exception):
    """A client sent what the channel's protocol does not allow."""


async def _upstream(ws: Socket, reader: asyncio.StreamReader) -> None:
    """The task's bytes to the client, then eof at the task's half-close."""
    while data := await reader.read(PORT_CHUNK):
        await ws.send(data)
    await ws.send(Eof().model_dump_json())


async def _downstream(ws: Socket, writer: asyncio.StreamWriter) -> None:
    """The client's bytes to the task, until its eof (a half-close, passed on)."""
    while True:
        frame = await ws.recv()
        if isinstance(frame, bytes):
            writer.write(frame)
            await writer.drain()
        elif isinstance(control(frame), Eof):
            if writer.can_write_eof():
                writer.write_eof()
            return
        else:
            raise _BadFrame("not a control message of a port channel: eof")

