"""SQLite serves one controller: an exclusive lock beside the database file (`corral.db.lock`), held for the
process's life.

The data directory's lock (lock.py) stops a second controller on the same directory; this one stops two
controllers on different directories from sharing one `--db sqlite:///PATH`, which SQLite's single writer and the
controllers' in-memory state cannot serve. `corral store copy` takes it too, so no controller writes to a store
while it is copied. Like the data directory's lock it is the kernel's (flock) and names its holder.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from corral.controller.lock import Holder, read_holder, write_holder


class SQLiteStoreInUse(Exception):
    """Another live process (a controller, or `corral store copy`) holds the SQLite store's lock."""

    def __init__(self, database: Path, holder: Holder | None) -> None:
        who = f"pid {holder.pid} ({holder.url})" if holder and holder.pid else "another process"
        super().__init__(f"the SQLite store {database.resolve()} is in use by {who}: SQLite serves one controller; "
                         "for several controllers use PostgreSQL (corral store copy, docs/controllers.md)")


def lock_path(database: Path) -> Path:
    return database.with_name(database.name + ".lock")


@contextlib.contextmanager
def hold_sqlite_store(database: Path | None, holder: str) -> Iterator[None]:
    """Hold the lock of the SQLite file `database` for the block (`holder` says who in its record, a controller's
    URL or a command), or raise SQLiteStoreInUse naming the live holder. None (not SQLite) holds nothing."""
    if database is None:
        yield
        return
    fd = os.open(lock_path(database), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SQLiteStoreInUse(database, read_holder(fd)) from None
        write_holder(fd, holder)
        yield
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)
