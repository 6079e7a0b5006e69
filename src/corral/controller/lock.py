"""One controller per data directory: an exclusive lock on `controller.lock`, held for the process's life.

The lock file also says who holds it (pid, start time, address), which is how a second start
names the live controller and how `corral down` finds it. The lock is the kernel's (flock): it
goes with the process, however it ends, so a stale file never blocks a new start.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

LOCK_FILE = "controller.lock"


@dataclass(frozen=True)
class Holder:
    pid: int
    started: float  # the process's start time, so a recycled pid is not taken for it
    url: str

    def describe(self) -> str:
        return f"the controller with pid {self.pid} at {self.url}" if self.pid else "another controller"


class DataDirInUse(Exception):
    """Another live controller holds the data directory's lock."""

    def __init__(self, data_dir: Path, holder: Holder | None) -> None:
        who = holder.describe() if holder else "another controller"
        data_dir = data_dir.resolve()
        super().__init__(f"the data directory {data_dir} is in use by {who}: "
                         f"stop it first (corral down --data-dir {data_dir})")


def process_started(pid: int) -> float | None:
    """When process `pid` started; None if there is no such process."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _read_holder(fd: int) -> Holder | None:
    try:
        record = json.loads(os.pread(fd, 4096, 0))
        return Holder(int(record["pid"]), float(record["started"]), str(record["url"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


@contextlib.contextmanager
def hold(data_dir: Path, url: str) -> Iterator[None]:
    """Hold the data directory's lock for the block, or raise DataDirInUse naming the live holder."""
    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataDirInUse(data_dir, _read_holder(fd)) from None
        record = {"pid": os.getpid(), "started": process_started(os.getpid()), "url": url}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        yield
        os.ftruncate(fd, 0)  # the holder is leaving: no one to name
    finally:
        os.close(fd)  # releases the lock


def holder(data_dir: Path) -> Holder | None:
    """The live controller that holds the data directory's lock, if any (without taking it)."""
    try:
        fd = os.open(data_dir / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_holder(fd) or Holder(0, 0.0, "")  # it is writing its record now
        return None  # no one holds it
    finally:
        os.close(fd)
