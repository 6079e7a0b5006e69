"""The store handle: one engine, short transactions, and one writer at a time on SQLite."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from sqlalchemy import CursorResult, Executable, event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from corral.metrics import HANDLER_LOCK_BUSY, STORE_WRITE_SECONDS
from corral.store.changes import StaleWrite
from corral.store.database import ONE_CONNECTION, make_engine, open_engine
from corral.store.handler_locks import HandlerBusy, take_handler_lock
from corral.store.write_lock import WriteLock

WROTE = "corral_wrote"  # in a connection's info: whether its transaction changed rows
WRITES = ("INSERT", "UPDATE", "DELETE")
# PostgreSQL's deadlock_detected and serialization_failure: of transactions of two controllers waiting on each
# other, it rolled this one back. Another controller got there first: a fenced-off write (StaleWrite), not an error.
LOST_RACES = frozenset({"40P01", "40001"})


def _note_written_rows(connection, cursor, statement: str, _parameters, _context, _executemany) -> None:
    if statement.lstrip()[:6].upper() in WRITES and cursor.rowcount != 0:
        connection.info[WROTE] = True


class Store:
    def __init__(self, engine: AsyncEngine, writer: AsyncEngine | None = None) -> None:
        """`engine`: the readers' pool; `writer`: the write transactions' own connection (by default, from the
        readers' pool). A writer of its own never waits for a connection behind the reads: it is held by
        the single write lock, and every write queued behind it waits the longer (at 600 workers, a poll's read
        waited 0.7 s for a connection of the shared pool)."""
        self.engine = engine
        self.writer = writer or engine
        self.is_sqlite = engine.dialect.name == "sqlite"
        # SQLite has one writer; queueing here is cheaper than its busy-wait. Liveness marks go first.
        self._write_lock = WriteLock()
        # Called after each committed write: how in-process readers (the event stream) learn of changes.
        self.on_commit: list[Callable[[], None]] = []
        # Called after a committed write that changed rows (other than liveness marks): how other controllers
        # sharing the store learn of it (store.notify).
        self.on_change: Callable[[], None] | None = None
        # Commits here that may have moved state (`moves_state`: all but liveness marks and the like). Where every
        # writer is this store (SQLite), a read of state is current while this count is unchanged.
        self.state_commits = 0
        if not self.is_sqlite:  # only other controllers are told of changes, and SQLite has no other
            event.listen(self.writer.sync_engine, "after_cursor_execute", _note_written_rows)

    @classmethod
    async def open(cls, url: str) -> Store:
        return cls(await open_engine(url), make_engine(url, ONE_CONNECTION, on_loop=True))

    @asynccontextmanager
    async def write(self, handler: str | None = None, *, moves_state: bool = True,
                    liveness: bool = False) -> AsyncIterator[AsyncConnection]:
        """A read-modify-write transaction: what it reads is what it writes against. With `handler`, its lock is
        the transaction's first statement (one controller at a time): HandlerBusy when another holds it. Without
        `moves_state` (a liveness mark, the registry's refresh) other controllers are not told of it. A `liveness`
        write (the workers' marks) takes the writer before the other writes waiting for it (WriteLock)."""
        async with self._write_lock.held(liveness=liveness):
            started = time.perf_counter()
            try:
                async with self.writer.begin() as connection:
                    connection.info[WROTE] = False
                    if handler is not None and not await take_handler_lock(connection, handler):
                        HANDLER_LOCK_BUSY.labels(handler).inc()
                        raise HandlerBusy(handler)
                    yield connection
                    wrote = connection.info[WROTE]
            except DBAPIError as error:
                if getattr(error.orig, "sqlstate", None) not in LOST_RACES:
                    raise
                raise StaleWrite(f"PostgreSQL rolled this transaction back ({str(error.orig).splitlines()[0]})") \
                    from None
            STORE_WRITE_SECONDS.observe(time.perf_counter() - started)
        if moves_state:
            self.state_commits += 1
        for listener in self.on_commit:
            listener()
        if wrote and moves_state and self.on_change is not None:
            self.on_change()

    @asynccontextmanager
    async def read(self, handler: str | None = None) -> AsyncIterator[AsyncConnection]:
        """A read; with `handler`, held as that handler's run (see `write`) for work outside the store."""
        async with self.engine.connect() as connection:
            if handler is not None and not await take_handler_lock(connection, handler):
                HANDLER_LOCK_BUSY.labels(handler).inc()
                raise HandlerBusy(handler)
            yield connection

    @asynccontextmanager
    async def read_when_needed(self) -> AsyncIterator[ReadWhenNeeded]:
        """A read whose connection is taken from the pool at its first statement, if it runs any, and given back at
        the end: for a caller that mostly answers from memory (a submission's kept settings), where taking and
        giving back a connection for nothing cost some 100 µs of CPU a call."""
        async with AsyncExitStack() as opened:
            yield ReadWhenNeeded(lambda: opened.enter_async_context(self.read()))

    async def close(self) -> None:
        await self.engine.dispose()
        if self.writer is not self.engine:
            await self.writer.dispose()


class ReadWhenNeeded:
    """Stands for a read connection (its `execute`) until a statement needs one: `Store.read_when_needed`."""

    def __init__(self, open_read: Callable[[], Awaitable[AsyncConnection]]) -> None:
        self._open_read = open_read
        self._connection: AsyncConnection | None = None

    async def execute(self, statement: Executable, parameters: Mapping[str, Any] | None = None) -> CursorResult:
        if self._connection is None:
            self._connection = await self._open_read()
        return await self._connection.execute(statement, parameters)
