"""Reading a statement's rows off the event loop: converting their values (each JSON column parsed) is pure CPU,
hundreds of milliseconds for a thousand workers' rows, while the loop has heartbeats to answer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Result, Row

T = TypeVar("T")

# Rows (or items) converted on the loop itself: so few cost less than a hop to a thread and back, which on a busy
# machine waits for a core, and a poll answering one worker's orders would pay it on every order it carries.
ON_LOOP = 32


async def rows_of(result: Result, on_loop: int | None = None) -> list[Row]:
    """All the result's rows, those past the first `on_loop` (ON_LOOP) read in a thread: the async drivers fetch
    every row before `execute` returns, so the thread touches no connection, only the buffered rows."""
    on_loop = ON_LOOP if on_loop is None else on_loop
    rows = result.fetchmany(on_loop)
    if len(rows) < on_loop:
        return rows
    return rows + await asyncio.to_thread(result.all)


async def converted(count: int, convert: Callable[..., T], *args: object, on_loop: int | None = None) -> T:
    """`convert(*args)`, in a thread where it converts more than `on_loop` (ON_LOOP) items (`count`)."""
    if count <= (ON_LOOP if on_loop is None else on_loop):
        return convert(*args)
    return await asyncio.to_thread(convert, *args)
