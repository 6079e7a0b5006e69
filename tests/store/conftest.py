"""Every store test runs on both backends: a SQLite file and the PostgreSQL server on 127.0.0.1:5432.

Each PostgreSQL test gets a database of its own, so test runs on one server never collide.
"""

from __future__ import annotations

import sys

import pytest
from sqlalchemy import Delete, Insert, Select, Update

from tests.postgres import opened_store


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request, tmp_path):
    async with opened_store(request.param, tmp_path) as opened:
        yield opened


@pytest.fixture
def statements_made(monkeypatch) -> list[str]:
    """The module and function that made each SELECT, UPDATE, INSERT and DELETE statement object since: the first
    caller outside SQLAlchemy (past `select()`, `update()` and a dialect's `insert()`)."""
    made: list[str] = []
    for kind in (Select, Update, Insert, Delete):
        def counted(self, *args, _made=kind.__init__, **kwargs):
            frame = sys._getframe(1)
            while frame.f_globals.get("__name__", "").startswith("sqlalchemy."):
                frame = frame.f_back
            made.append(frame.f_globals.get("__name__", "") + ":" + frame.f_code.co_name)
            _made(self, *args, **kwargs)
        monkeypatch.setattr(kind, "__init__", counted)
    return made
