"""SQLite statements that cost one trip to aiosqlite's thread rather than four.

Through SQLAlchemy's aiosqlite adapter each statement is four trips between the event loop and the connection's
thread: the cursor made, the statement run, its rows fetched, the cursor closed. Each trip is a wake-up of that
thread and a wake-up of the loop after it, and an array's tasks cost the controller a few statements each. Here the
cursor is made, run, emptied and closed in one trip; SQLAlchemy reads the rows, the row count and the last row id
from what that trip kept. Server-side cursors (streamed results) keep aiosqlite's own.

The writer's statements make no trip at all (`on_loop`): they run on the event loop, where the trip cost more CPU
than most of them (the thread's wake-up, the loop's, the GIL handed over twice). So do its commits where the file is
in WAL mode (`wal`): the writer's connection does not checkpoint in its commit (wal_autocheckpoint=0), so a commit is
the WAL's append alone, with no fsync (synchronous=NORMAL); after a commit that leaves the WAL at CHECKPOINT_PAGES or
more (`WalSize`) the checkpoint that SQLite's automatic checkpoint would have run in that commit (PASSIVE, on this
connection, with its fsyncs) runs in the connection's thread before the commit returns, so that the fsyncs never
hold up the loop. Its rollbacks still go to the thread, and so do its statements of many rows (`_bulk`: a DELETE,
a prune's; an executemany or a statement of many bound values; a statement that once took the loop SLOW_STATEMENT
of CPU, such as a large read inside a write, learned by its text). A transaction
on the loop yields to it (`_loop_turn`) before a statement once it has held it YIELD_AFTER since the loop last
turned, so that heartbeats and other requests are served while a long transaction is under way; its statements run
one at a time as before, and nothing else writes meanwhile (Store.write). The store is this controller's alone
(sqlite_lock.py), so the writer waits for no lock: its busy timeout is 0 on the loop, and a statement that finds
the database locked all the same (another process on the file) is run again in the thread, where it waits
BUSY_TIMEOUT as every statement did before.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import mmap
import os
import sqlite3
import struct
import time
import types
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import aiosqlite
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
    AsyncAdapt_aiosqlite_dbapi,
)
from sqlalchemy.util.concurrency import await_

log = logging.getLogger("corral.store")


class _Ran:
    """What a statement's trip kept of its sqlite3 cursor, standing in for aiosqlite's cursor once closed."""

    __slots__ = ("description", "rowcount", "lastrowid", "arraysize")

    def __init__(self) -> None:
        self.description: Any = None
        self.rowcount = -1
        self.lastrowid: int | None = None
        self.arraysize = 1

    def keep(self, cursor: sqlite3.Cursor) -> None:
        self.description, self.rowcount, self.lastrowid = cursor.description, cursor.rowcount, cursor.lastrowid

    async def close(self) -> None:
        """The sqlite3 cursor was closed in its trip."""


BUSY_TIMEOUT = 30.0  # seconds a statement waits for a lock held by another connection (make_engine's `timeout`)


def _locked(error: sqlite3.OperationalError) -> bool:
    """SQLITE_BUSY (or one of its extended codes): a lock another connection holds; the statement did nothing."""
    return (getattr(error, "sqlite_errorcode", 0) & 0xFF) == sqlite3.SQLITE_BUSY


# Seconds a transaction on the loop may hold it before it yields, between two statements. 0: before each statement
# but the first since the loop last turned. A budget of 2 ms let 1,000 workers' long polls run late under load
# (bench/many_workers.py); a yield each statement kept them on time (docs/performance.md, 2026-11-30).
YIELD_AFTER = 0.0
SLOW_STATEMENT = 0.002  # seconds of CPU a statement on the loop took that send its text to the thread from then on
MANY_ROWS = 64  # an executemany of more rows keeps its trip
MANY_VALUES = 512  # so does a statement of more bound values (a multi-row INSERT, an IN of many ids)


@types.coroutine
def _loop_turn() -> Generator[None, None, None]:
    """One turn of the loop: what `asyncio.sleep(0)` does (a bare yield), apart from it, so that a test that fakes
    time through `asyncio.sleep` does not count the writer's turns as its pauses."""
    yield


def _bulk(run: str, operation: Any, parameters: Any, slow: set[Any]) -> bool:
    """A statement of many rows, which keeps its trip so that the loop does not wait for it: a DELETE (the retention
    passes' prunes remove a minute's rows or more at once, some 100,000 history rows, a second of SQLite's work on
    a loaded machine), an executemany of more than MANY_ROWS rows, a statement of more than MANY_VALUES bound values,
    or one whose text took SLOW_STATEMENT on the loop before (`slow`)."""
    if operation[:6].upper() == "DELETE" or operation in slow:
        return True
    if parameters is None:
        return False
    return len(parameters) > (MANY_ROWS if run == "executemany" else MANY_VALUES)


def _waiting(connection: aiosqlite.Connection, function: Callable[..., Any], *args: Any) -> Any:
    """In the connection's thread: `function(*args)`, waiting up to BUSY_TIMEOUT for another connection's lock."""
    set_timeout = connection._conn.execute
    set_timeout(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT * 1000)}").close()
    try:
        return function(*args)
    finally:
        set_timeout("PRAGMA busy_timeout=0").close()


def _waited_trip(connection: aiosqlite.Connection, ran: _Ran, run: str, operation: Any,
                 parameters: Any) -> list[Any] | None:
    """In the connection's thread: `_trip`, waiting for another connection's lock (`_waiting`)."""
    return _waiting(connection, _trip, connection, ran, run, operation, parameters)


def _waited_commit(connection: aiosqlite.Connection) -> None:
    """In the connection's thread: its commit, waiting for another connection's lock (`_waiting`)."""
    _waiting(connection, connection._conn.commit)


CHECKPOINT_PAGES = 1000  # the WAL's frames (pages) past which it is checkpointed: SQLite's wal_autocheckpoint default
# Where the WAL's size in frames is read: mxFrame, a native 32-bit integer at this offset of the wal-index (the
# "-shm" file), in the first copy of its header (https://www.sqlite.org/walformat.html, "The WAL-Index Header").
MX_FRAME = struct.Struct("=I")
MX_FRAME_OFFSET = 16


class WalSize:
    """The size in frames (pages) of a database's WAL, read from its wal-index (the "-shm" file, mapped read-only):
    no statement, no trip. After the writer's commit on the loop, what tells whether SQLite's automatic checkpoint
    would have run at the end of that commit (the WAL at wal_autocheckpoint pages or more).

    Its descriptor of the file stays open until `close`, which its connection calls once SQLite's own connection is
    closed: a POSIX lock belongs to the process, so closing any descriptor of the file drops every lock SQLite holds
    on it here. Without them another process that opens the database (an operator's `sqlite3`) finds it open
    nowhere and rebuilds the index under this process's mappings of it, which then die of SIGBUS."""

    def __init__(self, database: Path) -> None:
        self._database = database
        self._file: int | None = None
        self._index: mmap.mmap | None = None

    def frames(self) -> int:
        """The WAL's frames; CHECKPOINT_PAGES where its wal-index cannot be read (then a checkpoint runs, as it
        could have in the commit)."""
        try:
            if self._index is None:
                if self._file is None:
                    self._file = os.open(f"{self._database}-shm", os.O_RDONLY)
                self._index = mmap.mmap(self._file, MX_FRAME_OFFSET + MX_FRAME.size, access=mmap.ACCESS_READ)
            return MX_FRAME.unpack_from(self._index, MX_FRAME_OFFSET)[0]
        except (OSError, ValueError):
            return CHECKPOINT_PAGES

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
            self._index = None
        if self._file is not None:
            os.close(self._file)
            self._file = None


def _checkpoint(connection: aiosqlite.Connection) -> None:
    """In the connection's thread: what SQLite's automatic checkpoint runs at the end of a commit that takes the
    WAL past wal_autocheckpoint pages (a PASSIVE checkpoint: it waits for no reader and no lock). As there, the
    commit stands whatever becomes of its checkpoint: a failed one is logged and tried again after the next commit."""
    try:
        connection._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").close()
    except sqlite3.Error as error:
        log.warning("the WAL's checkpoint after a commit failed: %s", error)


def _trip(connection: aiosqlite.Connection, ran: _Ran, run: str, operation: Any,
          parameters: Any) -> list[Any] | None:
    """In the connection's thread: the statement run on a cursor of its own, its rows (if it has any), the cursor
    closed, whether or not the statement failed."""
    cursor = connection._conn.cursor()
    try:
        if parameters is None:
            getattr(cursor, run)(operation)
        else:
            getattr(cursor, run)(operation, parameters)
        rows = cursor.fetchall() if cursor.description else None
        ran.keep(cursor)
        return rows
    finally:
        cursor.close()


class OneTripCursor(AsyncAdapt_aiosqlite_cursor):
    """SQLAlchemy's aiosqlite cursor, each statement one trip to the connection's thread."""

    __slots__ = ()

    def _make_new_cursor(self, connection: aiosqlite.Connection) -> _Ran:
        return _Ran()

    def _aenter_cursor(self, cursor: _Ran) -> _Ran:
        return cursor

    async def _execute_async(self, operation: Any, parameters: Any) -> Any:
        return await self._run("execute", operation, parameters)

    async def _executemany_async(self, operation: Any, seq_of_parameters: Any) -> Any:
        return await self._run("executemany", operation, seq_of_parameters)

    async def _run(self, run: str, operation: Any, parameters: Any) -> _Ran:
        adapted = self._adapt_connection
        rows = None
        trip = _trip
        # On the loop: the writer's statements but those of many rows, none while a trip of the connection is
        # under way.
        if adapted.on_loop and not _bulk(run, operation, parameters, adapted.slow):
            await adapted.turn()
            if not adapted._execute_mutex.locked():
                started = time.thread_time()
                try:
                    rows = _trip(self._connection, self._cursor, run, operation, parameters)
                    trip = None
                except sqlite3.OperationalError as error:
                    if not _locked(error):
                        raise
                    trip = _waited_trip
                if time.thread_time() - started > SLOW_STATEMENT:
                    adapted.slow.add(operation)
        if trip is not None:
            async with adapted._execute_mutex:
                rows = await self._connection._execute(trip, self._connection, self._cursor, run, operation,
                                                       parameters)
        if rows is not None:
            self._rows = collections.deque(rows)
        return self._cursor


class OneTripConnection(AsyncAdapt_aiosqlite_connection):
    """Its statements one trip each; a commit or rollback with no transaction open none (the pool rolls back each
    connection it is given back, most of them after reads alone, which in SQLite open none)."""

    __slots__ = ("on_loop", "slow", "_held_since", "_turned", "wal")
    _cursor_cls = OneTripCursor

    def __init__(self, dbapi: Any, connection: aiosqlite.Connection, *, on_loop: bool = False) -> None:
        super().__init__(dbapi, connection)
        self.on_loop = on_loop
        self.slow: set[Any] = set()  # the texts of statements that took the loop SLOW_STATEMENT: theirs is the thread
        self._held_since = 0.0
        self._turned = True
        # The writer's WAL, where its file is in WAL mode and it does not checkpoint in its commits (make_engine):
        # its commits then run on the loop.
        self.wal: WalSize | None = None

    def _mark_turn(self) -> None:
        self._turned = True

    async def turn(self) -> None:
        """Before a statement on the loop: yield to the loop if this connection's statements have held it for more
        than YIELD_AFTER since it last turned. A callback put on the loop (`_mark_turn`) tells whether it turned
        since: it runs only once the task running these statements has let the loop go (an await that waited, a
        trip to the thread, a yield here)."""
        now = time.perf_counter()
        if not self._turned:
            if now - self._held_since <= YIELD_AFTER:
                return
            await _loop_turn()  # the callback was put on the loop before this task's wake-up: it runs first
            now = time.perf_counter()
        self._turned = False
        self._held_since = now
        asyncio.get_running_loop().call_soon(self._mark_turn)

    def _idle(self) -> bool:
        """No transaction open, so sqlite3's commit and rollback would do nothing. Read from the loop: the flag is
        SQLite's (sqlite3_get_autocommit), which no statement moves while SQLAlchemy ends a transaction."""
        connection = self._connection._connection
        return connection is not None and not connection.in_transaction

    def commit(self) -> None:
        if self._idle():
            return
        if self.wal is None or self._execute_mutex.locked():
            super().commit()
            return
        try:
            try:
                self._connection._conn.commit()  # the WAL's append alone: no checkpoint in it (wal_autocheckpoint=0)
            except sqlite3.OperationalError as error:
                if not _locked(error):
                    raise
                await_(self._in_thread(_waited_commit))
        except Exception as error:
            self._handle_exception(error)
        if self.wal.frames() >= CHECKPOINT_PAGES:  # where SQLite's own would have checkpointed in the commit
            await_(self._in_thread(_checkpoint))

    async def _in_thread(self, function: Callable[[aiosqlite.Connection], None]) -> None:
        async with self._execute_mutex:
            await self._connection._execute(function, self._connection)

    def rollback(self) -> None:
        if not self._idle():
            super().rollback()

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.wal is not None:  # after SQLite's connection: see WalSize
                self.wal.close()
                self.wal = None


class OneTripDBAPI(AsyncAdapt_aiosqlite_dbapi):
    """aiosqlite as SQLAlchemy's adapter wraps it, its connections' statements one trip each (`module=` of
    `create_async_engine`); with `on_loop`, their statements run on the event loop (see above)."""

    def __init__(self, *, on_loop: bool = False) -> None:
        super().__init__(aiosqlite, sqlite3)
        self.on_loop = on_loop

    def connect(self, *arg: Any, **kw: Any) -> OneTripConnection:
        adapted = super().connect(*arg, **kw)
        return OneTripConnection(self, adapted._connection, on_loop=self.on_loop)
