"""Each SQLite statement is one trip to aiosqlite's thread, with the rows, row count, last row id and errors it had
through SQLAlchemy's own aiosqlite cursor (corral.store.sqlite_trips)."""

from __future__ import annotations

import aiosqlite
import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, insert, select, text, update
from sqlalchemy.exc import IntegrityError, OperationalError

from corral.store.database import make_engine, sqlite_url

things = Table("things", MetaData(), Column("id", Integer, primary_key=True), Column("name", String, unique=True))


@pytest.fixture
async def engine(tmp_path):
    made = make_engine(sqlite_url(tmp_path / "trips.db"))
    async with made.begin() as connection:
        await connection.run_sync(things.metadata.create_all)
    yield made
    await made.dispose()


@pytest.fixture
def trips(monkeypatch) -> list[str]:
    """The names of the functions each trip to a connection's thread ran."""
    ran: list[str] = []
    original = aiosqlite.Connection._execute

    async def counted(self, fn, *args, **kwargs):
        ran.append(getattr(fn, "__name__", repr(fn)))
        return await original(self, fn, *args, **kwargs)

    monkeypatch.setattr(aiosqlite.Connection, "_execute", counted)
    return ran


async def test_a_statement_is_one_trip(engine, trips):
    async with engine.begin() as connection:
        await connection.execute(insert(things), [{"name": "a"}, {"name": "b"}])
        del trips[:]
        rows = (await connection.execute(select(things.c.name).order_by(things.c.id))).scalars().all()
        assert trips == ["_trip"]
        await connection.execute(update(things).where(things.c.name == "a").values(name="c"))
        assert trips == ["_trip", "_trip"]
    assert rows == ["a", "b"]


async def test_rows_counts_and_ids_as_before(engine):
    async with engine.begin() as connection:
        first = await connection.execute(insert(things).values(name="a"))
        assert first.inserted_primary_key == (1,)
        assert (await connection.execute(text("INSERT INTO things (name) VALUES ('b')"))).lastrowid == 2
        await connection.execute(insert(things), [{"name": "c"}, {"name": "d"}])  # executemany
        assert (await connection.execute(update(things).where(things.c.id > 1).values(name=things.c.name + "!"))
                ).rowcount == 3
        assert (await connection.execute(update(things).where(things.c.id > 9).values(name="x"))).rowcount == 0
        returned = await connection.execute(
            update(things).where(things.c.id == 1).values(name="z").returning(things.c.id, things.c.name))
        assert returned.all() == [(1, "z")]
        assert (await connection.execute(select(things).where(things.c.id > 9))).all() == []
        partial = await connection.execute(select(things.c.id).order_by(things.c.id))
        assert partial.fetchone() == (1,)
        assert partial.fetchmany(2) == [(2,), (3,)]
        assert partial.all() == [(4,)]


async def test_errors_reach_the_caller_and_leave_the_connection_usable(engine):
    async with engine.connect() as connection:
        await connection.execute(insert(things).values(name="a"))
        with pytest.raises(IntegrityError):
            await connection.execute(insert(things).values(name="a"))
        with pytest.raises(OperationalError):
            await connection.execute(text("SELECT nothing FROM nowhere"))
        await connection.rollback()
        assert (await connection.execute(select(things))).all() == []


async def test_the_pragmas_hold_on_each_connection(engine):
    async with engine.connect() as connection:
        assert (await connection.exec_driver_sql("PRAGMA journal_mode")).scalar() == "wal"
        assert (await connection.exec_driver_sql("PRAGMA foreign_keys")).scalar() == 1


async def test_ending_a_transaction_is_a_trip_only_where_one_is_open(engine, trips):
    async with engine.connect() as connection:  # a read: SQLite opens no transaction for it
        await connection.execute(select(things))
        del trips[:]
        await connection.rollback()
        await connection.commit()
    assert trips == []  # nor did the pool's rollback as it took the connection back
    async with engine.begin() as connection:
        await connection.execute(insert(things).values(name="a"))
        del trips[:]
    assert trips == ["commit"]
    async with engine.connect() as connection:
        await connection.execute(insert(things).values(name="b"))
        del trips[:]
        await connection.rollback()
        assert trips == ["rollback"]
    async with engine.connect() as other:
        assert (await other.execute(select(things.c.name))).scalars().all() == ["a"]
