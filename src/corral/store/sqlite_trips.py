"""SQLite statements that cost one trip to aiosqlite's thread rather than four.

Through SQLAlchemy's aiosqlite adapter each statement is four trips between the event loop and the connection's
thread: the cursor made, the statement run, its rows fetched, the cursor closed. Each trip is a wake-up of that
thread and a wake-up of the loop after it, and an array's tasks cost the controller a few statements each. Here the
cursor is made, run, emptied and closed in one trip; SQLAlchemy reads the rows, the row count and the last row id
from what that trip kept. Server-side cursors (streamed results) keep aiosqlite's own.
"""

from __future__ import annotations

import collections
import sqlite3
from typing import Any

import aiosqlite
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
    AsyncAdapt_aiosqlite_dbapi,
)


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
        async with self._adapt_connection._execute_mutex:
            rows = await self._connection._execute(_trip, self._connection, self._cursor, run, operation,
                                                   parameters)
        if rows is not None:
            self._rows = collections.deque(rows)
        return self._cursor


class OneTripConnection(AsyncAdapt_aiosqlite_connection):
    """Its statements one trip each; a commit or rollback with no transaction open none (the pool rolls back each
    connection it is given back, most of them after reads alone, which in SQLite open none)."""

    __slots__ = ()
    _cursor_cls = OneTripCursor

    def _idle(self) -> bool:
        """No transaction open, so sqlite3's commit and rollback would do nothing. Read from the loop: the flag is
        SQLite's (sqlite3_get_autocommit), which no statement moves while SQLAlchemy ends a transaction."""
        connection = self._connection._connection
        return connection is not None and not connection.in_transaction

    def commit(self) -> None:
        if not self._idle():
            super().commit()

    def rollback(self) -> None:
        if not self._idle():
            super().rollback()


class OneTripDBAPI(AsyncAdapt_aiosqlite_dbapi):
    """aiosqlite as SQLAlchemy's adapter wraps it, its connections' statements one trip each (`module=` of
    `create_async_engine`)."""

    def __init__(self) -> None:
        super().__init__(aiosqlite, sqlite3)

    def connect(self, *arg: Any, **kw: Any) -> OneTripConnection:
        adapted = super().connect(*arg, **kw)
        return OneTripConnection(self, adapted._connection)
