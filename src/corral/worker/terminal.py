"""An interactive attempt's terminal: the PTY its task runs on, and the clients attached to it (corral.core.relay).

The worker reads the PTY's master side for as long as the task runs, whether or not anyone is attached: the task
never blocks on a full terminal, its output goes to the attempt's `stdout` log (capped as a batch task's is), the
latest REPLAY_BYTES of it are kept for whoever attaches next, and each attached client gets it through an outbox of
its own, so a slow client holds up neither the task nor the others. One client holds the keyboard (the writer):
the first that attaches without `watch`; when it leaves, the next such client still attached gets it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import struct
import termios
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError
from websockets import ConnectionClosed

from corral.core.log_limits import truncation_marker
from corral.core.relay import (
    CLOSE_NORMAL,
    CLOSE_WORKER_ERROR,
    REPLAY_BYTES,
    STDOUT,
    ClientControl,
    Eof,
    Exit,
    Notice,
    Resize,
    Role,
)
from corral.core.wire import WireModel

READ_SIZE = 1 << 16
MAX_BACKLOG = 16 << 20  # bytes queued for one terminal client before it is dropped as too slow
ROOM = 1 << 20  # bytes queued for an exec's client below which its process's output is read on
CLOSE_BAD_DATA = 1007  # the standard code for a frame that is not what the protocol allows


class Socket(Protocol):
    """What a channel needs of its WebSocket (websockets' asyncio connection, or a test's fake): recv raises
    websockets.ConnectionClosed once the other side is gone."""

    async def send(self, message: bytes | str) -> None: ...

    async def recv(self) -> bytes | str: ...

    async def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None: ...


def open_pty(rows: int | None = None, cols: int | None = None) -> tuple[int, int]:
    """A new PTY pair (master, slave), the master non-blocking, with the window size when given."""
    master, slave = os.openpty()
    os.set_blocking(master, False)
    if rows and cols:
        set_window(master, rows, cols)
    return master, slave


def set_window(fd: int, rows: int, cols: int) -> None:
    """Set a terminal's window size; the kernel sends SIGWINCH to its foreground process group."""
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def take_terminal() -> None:
    """In a new session's first process, before exec (a preexec_fn): make stdin its controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


async def read_fd(fd: int) -> AsyncIterator[bytes]:
    """What a non-blocking descriptor yields until its end: EOF, or EIO from a PTY master once no process holds
    its slave side any more."""
    loop = asyncio.get_running_loop()
    readable = asyncio.Event()
    loop.add_reader(fd, readable.set)
    try:
        while True:
            try:
                data = os.read(fd, READ_SIZE)
            except BlockingIOError:
                readable.clear()
                await readable.wait()
                continue
            except OSError as error:
                if error.errno == errno.EIO:
                    return
                raise
            if not data:
                return
            yield data
    finally:
        loop.remove_reader(fd)


async def write_fd(fd: int, data: bytes) -> None:
    """Write all of `data` to a non-blocking descriptor, waiting while it is full."""
    loop = asyncio.get_running_loop()
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            writable = loop.create_future()
            loop.add_writer(fd, writable.set_result, None)
            try:
                await writable
            finally:
                loop.remove_writer(fd)


def close_reason(text: str) -> str:
    """`text` cut to what a WebSocket close frame holds (123 bytes of UTF-8)."""
    return text.encode()[:123].decode(errors="ignore")


def control(frame: str) -> Resize | Eof | None:
    """A client's control message, or None when the frame is not one."""
    try:
        return ClientControl.validate_json(frame)
    except ValidationError:
        return None


@dataclass(frozen=True)
class _Close:
    code: int
    reason: str


class Outbox:
    """The frames for one client, sent in order by a task of its own. A terminal's output never waits for a client:
    one that falls MAX_BACKLOG behind is dropped (closed); an exec's waits for `room`."""

    def __init__(self, ws: Socket) -> None:
        self.ws = ws
        self._queue: asyncio.Queue[bytes | str | _Close] = asyncio.Queue()
        self._backlog = 0
        self._room = asyncio.Event()
        self._room.set()
        self.closing = False
        self.task = asyncio.create_task(self._send())

    def output(self, data: bytes, stream: int = STDOUT) -> None:
        self._put(bytes([stream]) + data)

    def control(self, message: WireModel) -> None:
        self._put(message.model_dump_json())

    def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        if not self.closing:
            self.closing = True
            self._queue.put_nowait(_Close(code, reason))

    async def drained(self) -> None:
        """Until everything queued so far has been sent (or the client is gone)."""
        await self._until(self._queue.join())

    async def room(self) -> None:
        """Until less than ROOM bytes wait for the client (or it is gone)."""
        await self._until(self._room.wait())

    async def _until(self, event: Coroutine[Any, Any, Any]) -> None:
        waiting = asyncio.create_task(event)
        try:
            await asyncio.wait([waiting, self.task], return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()

    def _put(self, frame: bytes | str) -> None:
        if self.closing:
            return
        self._backlog += len(frame)
        if self._backlog >= ROOM:
            self._room.clear()
        if self._backlog > MAX_BACKLOG:
            self.close(CLOSE_WORKER_ERROR, f"client too slow: more than {MAX_BACKLOG >> 20} MiB waiting for it")
            return
        self._queue.put_nowait(frame)

    async def _send(self) -> None:
        while True:
            item = await self._queue.get()
            try:
                if isinstance(item, _Close):
                    await self.ws.close(item.code, item.reason)
                    return
                await self.ws.send(item)
                self._backlog -= len(item)
                if self._backlog < ROOM:
                    self._room.set()
            except ConnectionClosed:
                return
            finally:
                self._queue.task_done()


@dataclass(eq=False)
class _Client:
    outbox: Outbox
    watch: bool
    writer: bool = False


class Terminal:
    """An interactive attempt's PTY master, read by `pump` until the task's side is gone."""

    def __init__(self, master: int, log: Path, limit: int) -> None:
        self.master = master
        self.log = log
        self.limit = limit  # bytes of output kept in the log
        self.replay = bytearray()
        self.ended = False  # the task is gone: no one attaches any more
        self.closed = False  # the master is closed: nothing is written to it any more
        self._clients: list[_Client] = []

    async def pump(self) -> None:
        """Read the task's output until its end, into the log, the replay and every attached client's outbox."""
        kept = 0
        try:
            with self.log.open("ab", buffering=0) as file:
                async for data in read_fd(self.master):
                    if kept <= self.limit:
                        file.write(data[:self.limit - kept])
                        kept += len(data)
                        if kept > self.limit:
                            file.write(truncation_marker(self.limit))
                    self.replay += data
                    del self.replay[:-REPLAY_BYTES]
                    for client in self._clients:
                        client.outbox.output(data)
        finally:
            self.closed = True
            os.close(self.master)

    def finish(self, code: int | None, reason: str | None) -> None:
        """The task has ended: tell every client how, and close them."""
        self.ended = True
        for client in self._clients:
            client.outbox.control(Exit(code=code, reason=reason))
            client.outbox.close(CLOSE_NORMAL)

    async def attach(self, ws: Socket, watch: bool, rows: int | None, cols: int | None,
                     outbox: Outbox | None = None) -> None:
        """Serve one client until it leaves or the terminal ends: the replay first, then the output as it comes;
        its keys and resizes reach the terminal while it is the writer."""
        client = _Client(outbox or Outbox(ws), watch)
        self._clients.append(client)
        if not watch and not any(other.writer for other in self._clients):
            client.writer = True
        client.outbox.control(Role(writer=client.writer))
        if self.replay:
            client.outbox.output(bytes(self.replay))
        if client.writer and rows and cols and not self.closed:
            set_window(self.master, rows, cols)
        receiving = asyncio.create_task(self._receive(ws, client))
        try:
            await asyncio.wait([receiving, client.outbox.task], return_when=asyncio.FIRST_COMPLETED)
        finally:
            receiving.cancel()
            self._clients.remove(client)
            if client.writer:
                successor = next((other for other in self._clients if not other.watch), None)
                if successor is not None:
                    successor.writer = True
                    successor.outbox.control(Role(writer=True))
            if not client.outbox.task.done():
                client.outbox.close()
                await asyncio.wait([client.outbox.task], timeout=1.0)

    async def _receive(self, ws: Socket, client: _Client) -> None:
        with contextlib.suppress(ConnectionClosed):
            while True:
                frame = await ws.recv()
                if isinstance(frame, str):
                    message = control(frame)
                    if message is None:
                        client.outbox.close(CLOSE_BAD_DATA, "not a control message: resize or eof")
                        return
                    if isinstance(message, Resize) and client.writer and not self.closed:
                        set_window(self.master, message.rows, message.cols)
                elif client.writer and not self.closed:
                    with contextlib.suppress(OSError):  # the task's side went away meanwhile
                        await write_fd(self.master, frame)


def notice(job_id: int, what: str, reason: str, grace: float) -> Notice:
    """The line an attached client reads before its task is stopped or preempted."""
    return Notice(text=f"corral: job {job_id} is being {what} ({reason}): its processes get SIGTERM now and "
                       f"SIGKILL in {grace:g} s")
