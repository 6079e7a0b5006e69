"""Every store test runs on both backends: a SQLite file and the PostgreSQL server on 127.0.0.1:5432."""

from __future__ import annotations

import os

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from corral.store.database import sqlite_url
from corral.store.store import Store

POSTGRES_URL = os.environ.get("CORRAL_TEST_POSTGRES", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")


async def _postgres_ready() -> str | None:
    """None when the server answers, else why not (shown as the skip reason)."""
    engine = create_async_engine(POSTGRES_URL)
    try:
        async with engine.begin() as connection:
            await connection.execute(text("DROP SCHEMA public CASCADE"))
            await connection.execute(text("CREATE SCHEMA public"))
        return None
    except Exception as error:  # any failure to reach it is a reason to skip, shown to the reader
        return f"no PostgreSQL at {POSTGRES_URL}: {error.__class__.__name__}: {error}"
    finally:
        await engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request, tmp_path):
    if request.param == "sqlite":
        url = sqlite_url(tmp_path / "corral.db")
    else:
        why = await _postgres_ready()
        if why:
            if os.environ.get("CI"):
                pytest.fail(why)  # CI has the server: its absence is a failure there, not a skip
            pytest.skip(why)
        url = POSTGRES_URL
    opened = await Store.open(url)
    yield opened
    await opened.close()
