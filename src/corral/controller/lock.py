"""Who uses a data directory: a lock on `controller.lock`, held for the process's life; exclusive for a controller
of a SQLite store (one controller), shared by the controllers of one PostgreSQL store.

Each holder also keeps a record of itself (pid, start time, address) in `controllers/PID-N.json`, locked by it:
which is how a second start names the live controllers, how `corral down` finds them all, and how cluster.json
lists their addresses. The locks are the kernel's (flock): they go with the process, however it ends, so a stale
file never blocks a new start nor names a dead controller.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

LOCK_FILE = "controller.lock"
HOLDERS_DIR = "controllers"  # a record of each holder
_serials = itertools.count()  # several holders in one process (tests) have records of their own


@dataclass(frozen=True)
class Holder:
    pid: int
    started: float  # the process's start time, so a recycled pid is not taken for it
    url: str

    def describe(self) -> str:
        return f"the controller with pid {self.pid} at {self.url}" if self.pid else "another controller"


class DataDirInUse(Exception):
    """Live controllers hold the data directory's lock in a mode that excludes ours."""

    def __init__(self, data_dir: Path, holders: list[Holder], shared: bool) -> None:
        who = ", ".join(holder.describe() for holder in holders) or "another controller"
        data_dir = data_dir.resolve()
        why = ("a controller of a SQLite store shares it with none: stop it first, or give this one the same "
               "PostgreSQL --db") if shared else "stop it first"
        super().__init__(f"the data directory {data_dir} is in use by {who}: {why} "
                         f"(corral down --data-dir {data_dir})")


def process_started(pid: int) -> float | None:
    """When process `pid` started; None if there is no such process."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def read_holder(fd: int) -> Holder | None:
    try:
        record = json.loads(os.pread(fd, 4096, 0))
        return Holder(int(record["pid"]), float(record["started"]), str(record["url"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


@contextlib.contextmanager
def hold(data_dir: Path, url: str, shared: bool = False) -> Iterator[None]:
    """Hold the data directory's lock for the block (shared with other `shared` holders), or raise DataDirInUse
    naming the live holders."""
    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataDirInUse(data_dir, holders(data_dir), shared) from None
        with _recorded(data_dir, url):
            yield
    finally:
        os.close(fd)  # releases the lock


def write_holder(fd: int, url: str) -> None:
    """Name this process (pid, start time, `url`: its address or what it is) in the lock file `fd` it holds."""
    record = {"pid": os.getpid(), "started": process_started(os.getpid()), "url": url}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(record).encode(), 0)


@contextlib.contextmanager
def _recorded(data_dir: Path, url: str) -> Iterator[None]:
    """This process's record among the holders', locked by it while it lives."""
    folder = data_dir / HOLDERS_DIR
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / f"{os.getpid()}-{next(_serials)}.json"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # ours: a file of this pid left by a dead process is not locked
        write_holder(fd, url)
        yield
        path.unlink(missing_ok=True)  # the holder is leaving: no one to name
    finally:
        os.close(fd)


def holders(data_dir: Path) -> list[Holder]:
    """The live controllers that hold the data directory's lock (without taking it), by pid."""
    try:
        fd = os.open(data_dir / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return []
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return []  # no one holds it
        except BlockingIOError:
            pass
    finally:
        os.close(fd)
    found = [live for path in sorted((data_dir / HOLDERS_DIR).glob("*.json")) if (live := _live_record(path))]
    return sorted(found, key=lambda holder: holder.pid) or [Holder(0, 0.0, "")]  # one writing its record now


def _live_record(path: Path) -> Holder | None:
    """The record at `path` while its process lives (holds its lock)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return None  # its process is gone
        except BlockingIOError:
            return read_holder(fd) or Holder(0, 0.0, "")  # it is writing its record now
    finally:
        os.close(fd)
