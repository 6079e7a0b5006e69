"""The PostgreSQL server the tests use (127.0.0.1:5432, database `test`), and what to do without it."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from corral.store.database import sqlite_url
from corral.store.store import Store

POSTGRES_URL = os.environ.get("CORRAL_TEST_POSTGRES", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")


def unavailable(why: str) -> None:
    """Skip with the reason; in CI, which has the server, its absence fails the test instead."""
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


@asynccontextmanager
async def scratch_database() -> AsyncIterator[str]:
    """A database of its own for one test (a controller process owns it), dropped afterwards."""
    name = f"corral_{secrets.token_hex(4)}"
    admin = create_async_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as connection:
            await connection.execute(text(f"CREATE DATABASE {name}"))
    except Exception as error:
        await admin.dispose()
        unavailable(f"no PostgreSQL at {POSTGRES_URL}: {error.__class__.__name__}: {error}")
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        async with admin.connect() as connection:
            await connection.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        await admin.dispose()



@asynccontextmanager
async def opened_store(backend: str, directory: Path) -> AsyncIterator[Store]:
    """A Store on `backend`: "sqlite" (a file in `directory`) or "postgresql" (a database of its own); closed after."""
    async with AsyncExitStack() as stack:
        url = (sqlite_url(directory / "corral.db") if backend == "sqlite"
               else await stack.enter_async_context(scratch_database()))
        opened = await Store.open(url)
        try:
            yield opened
        finally:
            await opened.close()
