"""The store handle: one engine, short transactions, and one writer at a time on SQLite."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from corral.metrics import HANDLER_LOCK_BUSY, STORE_WRITE_SECONDS
from corral.store.database import open_engine
from corral.store.handler_locks import HandlerBusy, take_handler_lock


class Store:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.is_sqlite = engine.dialect.name == "sqlite"
        # SQLite has one writer; queueing here is cheaper than its busy-wait.
        self._write_lock = asyncio.Lock()
        # Called after each committed write: how in-process readers (the event stream) learn of changes.
        self.on_commit: list[Callable[[], None]] = []

    @classmethod
    async def open(cls, url: str) -> Store:
        return cls(await open_engine(url))

    @asynccontextmanager
    async def write(self, handler: str | None = None) -> AsyncIterator[AsyncConnection]:
        """A read-modify-write transaction: what it reads is what it writes against. With `handler`, its lock is
        the transaction's first statement (one controller at a time): HandlerBusy when another holds it."""
        async with self._write_lock:
            started = time.perf_counter()
            async with self.engine.begin() as connection:
                if handler is not None and not await take_handler_lock(connection, handler):
                    HANDLER_LOCK_BUSY.labels(handler).inc()
                    raise HandlerBusy(handler)
                yield connection
            STORE_WRITE_SECONDS.observe(time.perf_counter() - started)
        for listener in self.on_commit:
            listener()

    @asynccontextmanager
    async def read(self, handler: str | None = None) -> AsyncIterator[AsyncConnection]:
        """A read; with `handler`, held as that handler's run (see `write`) for work outside the store."""
        async with self.engine.connect() as connection:
            if handler is not None and not await take_handler_lock(connection, handler):
                HANDLER_LOCK_BUSY.labels(handler).inc()
                raise HandlerBusy(handler)
            yield connection

    async def close(self) -> None:
        await self.engine.dispose()
