"""Every store test runs on both backends: a SQLite file and the PostgreSQL server on 127.0.0.1:5432.

Each PostgreSQL test gets a database of its own, so test runs on one server never collide.
"""

from __future__ import annotations

import pytest

from corral.store.database import sqlite_url
from corral.store.store import Store
from tests.postgres import scratch_database


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request, tmp_path):
    if request.param == "sqlite":
        opened = await Store.open(sqlite_url(tmp_path / "corral.db"))
        yield opened
        await opened.close()
        return
    async with scratch_database() as url:
        opened = await Store.open(url)
        yield opened
        await opened.close()
