"""Keeps each attempt's `stdout` and `stderr` in files, up to a cap, and ships them (and its environment's `build`
log) to the controller.

The files on the worker are the truth; the shipper only remembers, per stream, how many
bytes the controller has acknowledged, so a failed send is simply sent again from the same
offset next round and the controller's copy never has a gap or a duplicate.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import stat
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from corral.core.log_limits import truncation_marker
from corral.worker.accounts import no_follow

log = logging.getLogger("corral.worker.logs")

SendLog = Callable[[int, int, str, int, bytes], Awaitable[None]]
"""send(task_id, attempt, stream, offset, data): raises when the bytes did not arrive."""

STREAMS = ("stdout", "stderr", "build")  # build: uv's output while its Python environment was built
CHUNK = 1 << 20
READ_SIZE = 1 << 18  # what one read of a task's pipe takes at most


async def capture(pipe: int, path: str | Path, limit: int) -> None:
    """Append what the task prints into the pipe's read end (which this closes) to `path`, until `limit` bytes,
    then the truncation marker; the rest is read and dropped, so the task never blocks on a full pipe and the
    file never grows past the cap. Appended, so that an `exec --detach`'s output can join a running task's.

    The file is created with the first byte, not before: a task that prints nothing (most of a large array)
    costs no file, and creating one can block for a millisecond on a busy disk. The shipper and the retention
    already take a missing stream as an empty one. The pipe is read straight from the loop's selector rather than
    through an asyncio transport and stream, whose objects and callbacks cost each task's two streams more than
    the reads themselves."""
    loop = asyncio.get_running_loop()
    kept = 0
    file = None
    try:
        os.set_blocking(pipe, False)
        while data := await _read(loop, pipe):
            if kept > limit:
                continue  # cut already
            if file is None:
                file = await asyncio.to_thread(open_log, path)
            file.write(data[:limit - kept])
            kept += len(data)
            if kept > limit:
                file.write(truncation_marker(limit))
    finally:
        os.close(pipe)
        if file is not None:
            file.close()


async def _read(loop: asyncio.AbstractEventLoop, pipe: int) -> bytes:
    """Up to READ_SIZE bytes of the (non-blocking) pipe, once it holds some; b"" once its last writer has gone."""
    while True:
        try:
            return os.read(pipe, READ_SIZE)
        except BlockingIOError:
            pass
        readable = loop.create_future()
        loop.add_reader(pipe, _wake, readable)
        try:
            await readable
        finally:
            loop.remove_reader(pipe)


def _wake(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


def open_log(path: str | Path) -> BinaryIO:
    """`path` opened to append, created if missing. It may be opened after the task has run for a while, in a
    directory a task run as its owner may write: a symbolic link put there is refused (ELOOP) rather than followed
    to one of root's files, and anything but a plain file (a FIFO would block the open) is refused too."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a plain file", str(path))
    os.set_blocking(fd, True)
    return os.fdopen(fd, "ab", buffering=0)


@dataclass
class _Attempt:
    directory: str | Path
    offsets: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STREAMS, 0))
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one sender per attempt: offsets stay ordered
    final: bool = False  # flushed already: forget it once everything has arrived


class LogShipper:
    def __init__(self, send: SendLog, *, interval: float = 0.5, chunk: int = CHUNK,
                 flush_timeout: float = 10.0) -> None:
        self._send = send
        self.interval = interval
        self.chunk = chunk
        self.flush_timeout = flush_timeout
        self._attempts: dict[tuple[int, int], _Attempt] = {}

    def watch(self, task_id: int, attempt: int, directory: str | Path) -> None:
        """Start shipping `directory/stdout` and `directory/stderr` of this attempt."""
        self._attempts.setdefault((task_id, attempt), _Attempt(directory))

    async def run(self) -> None:
        """Ship new bytes of every attempt every `interval` seconds, forever."""
        while True:
            await self.ship_once()
            await asyncio.sleep(self.interval)

    async def ship_once(self) -> None:
        for key, entry in list(self._attempts.items()):
            if await self._ship(key) and entry.final:
                self._attempts.pop(key, None)  # its flush, which this round waited for, may have let it go already

    async def flush(self, task_id: int, attempt: int) -> None:
        """Ship everything the attempt wrote, retrying for up to `flush_timeout` seconds, then stop tracking it.

        Past the timeout the rest is left to the periodic rounds, so a controller that is down
        delays a task's final report by at most the timeout.
        """
        key = (task_id, attempt)
        if key not in self._attempts:
            return
        self._attempts[key].final = True
        deadline = time.monotonic() + self.flush_timeout
        delay = 0.2
        while not await self._ship(key):
            if time.monotonic() + delay > deadline:
                log.warning("task=%s attempt=%s logs not fully shipped at the end; still trying", task_id, attempt)
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
        self._attempts.pop(key, None)

    async def _ship(self, key: tuple[int, int]) -> bool:
        """Send what was appended since the last acknowledged offset; True when nothing is left behind."""
        entry = self._attempts.get(key)
        if entry is None:
            return True
        async with entry.lock:
            try:  # one look for the three streams, which most attempts never write: 5 us, where three opens took 44
                present = os.listdir(entry.directory)
            except FileNotFoundError:
                return True
            for stream in STREAMS:
                if stream not in present:
                    continue
                path = os.path.join(entry.directory, stream)
                try:
                    with open(path, "rb", opener=no_follow) as file:
                        end = file.seek(0, 2)  # what exists now: a chatty task cannot keep a round going
                        file.seek(entry.offsets[stream])
                        while entry.offsets[stream] < end:
                            data = file.read(min(self.chunk, end - entry.offsets[stream]))
                            if not data:
                                break
                            await self._send(*key, stream, entry.offsets[stream], data)
                            entry.offsets[stream] += len(data)
                except FileNotFoundError:
                    continue
                except Exception as error:
                    log.info("task=%s attempt=%s %s not shipped at offset %s, will retry: %s", *key, stream,
                             entry.offsets[stream], error)
                    return False
        return True
