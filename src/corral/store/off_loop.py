"""Reading a statement's rows off the event loop: converting their values (each JSON column parsed) is pure CPU,
hundreds of milliseconds for a thousand workers' rows, while the loop has heartbeats to answer."""

from __future__ import annotations

import asyncio

from sqlalchemy import Result, Row


async def rows_of(result: Result) -> list[Row]:
    """All the result's rows, read in a thread: the async drivers fetch every row before `execute` returns, so the
    thread touches no connection, only the buffered rows."""
    return await asyncio.to_thread(result.all)
