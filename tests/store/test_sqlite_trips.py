"""Each SQLite statement is one trip to aiosqlite's thread, with the rows, row count, last row id and errors it had
through SQLAlchemy's own aiosqlite cursor (corral.store.sqlite_trips)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import aiosqlite
import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, func, insert, select, text, update
from sqlalchemy.exc import IntegrityError, OperationalError

from corral.store import sqlite_trips
from corral.store.database import ONE_CONNECTION, make_engine, sqlite_url

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


@pytest.fixture
async def writer(tmp_path, engine):
    """The single writer's engine on the same file: its statements run on the loop (`on_loop`)."""
    made = make_engine(sqlite_url(tmp_path / "trips.db"), ONE_CONNECTION, on_loop=True)
    yield made
    await made.dispose()


async def test_the_writers_statements_and_commit_make_no_trip(writer, trips):
    async with writer.begin() as connection:
        await connection.execute(text("SELECT 1"))  # the connection made, its pragmas run
        del trips[:]
        await connection.execute(insert(things), [{"name": "a"}, {"name": "b"}])
        first = await connection.execute(insert(things).values(name="c"))
        assert first.inserted_primary_key == (3,)
        assert (await connection.execute(update(things).where(things.c.id > 1).values(name=things.c.name + "!"))
                ).rowcount == 2
        rows = (await connection.execute(select(things.c.name).order_by(things.c.id))).scalars().all()
        with pytest.raises(IntegrityError):
            await connection.execute(insert(things).values(name="a"))
        assert trips == []
    assert trips == []  # the commit too: on the loop, the WAL's append alone (WalCheckpoints)
    assert rows == ["a", "b!", "c!"]
    async with writer.connect() as connection:
        assert (await connection.exec_driver_sql("PRAGMA busy_timeout")).scalar() == 0
        assert (await connection.execute(select(things.c.name).order_by(things.c.id))).scalars().all() == rows


async def test_a_writer_that_finds_the_file_locked_waits_in_the_thread_not_on_the_loop(engine, writer, trips):
    """Another connection holds the write lock: the writer's statement waits for it in its thread (as every
    statement did before), the loop runs on meanwhile, and the statement goes through once the lock is let go."""
    async with writer.connect() as connection:
        await connection.execute(text("SELECT 1"))
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.001)

    ticking = asyncio.create_task(tick())
    try:
        async with engine.begin() as holder:
            await holder.execute(insert(things).values(name="held"))  # the write lock, held
            del trips[:]
            waiting = asyncio.create_task(_insert(writer, "waited"))
            await asyncio.sleep(0)  # the writer's statement found the lock taken and went to its thread
            before = ticks
            await asyncio.wait_for(_until(lambda: ticks >= before + 5), 10)  # the loop ran on meanwhile
            assert not waiting.done()
        await asyncio.wait_for(waiting, 10)
    finally:
        ticking.cancel()
    assert trips == ["_waited_trip", "commit"]  # the holder's commit; the writer's on the loop
    async with engine.connect() as connection:
        assert (await connection.execute(select(things.c.name).order_by(things.c.id))).scalars().all() == [
            "held", "waited"]
        async with writer.connect() as again:
            assert (await again.exec_driver_sql("PRAGMA busy_timeout")).scalar() == 0  # as it was, after the wait


async def _insert(engine, name: str) -> None:
    async with engine.begin() as connection:
        await connection.execute(insert(things).values(name=name))


async def _until(condition) -> None:
    while not condition():
        await asyncio.sleep(0.001)


async def test_the_writers_deletes_keep_their_trip(writer, trips):
    """A prune removes many rows at once: the loop does not wait for it."""
    await _insert(writer, "a")
    del trips[:]
    async with writer.begin() as connection:
        assert (await connection.execute(things.delete().where(things.c.name == "a"))).rowcount == 1
        assert trips == ["_trip"]
    async with writer.connect() as connection:
        assert (await connection.execute(select(things))).all() == []


async def _ticking(ticks: list[int]) -> None:
    while True:
        ticks[0] += 1
        await asyncio.sleep(0)


@pytest.mark.parametrize(("budget", "turns"), [(0.0, 5), (60.0, 0)])
async def test_a_long_transaction_on_the_loop_yields_to_it_between_statements(writer, trips, monkeypatch, budget,
                                                                              turns):
    """Past YIELD_AFTER since the loop last turned the writer lets it turn before its next statement (other requests
    are served meanwhile), its statements still on the loop; within it, it runs on without a turn."""
    monkeypatch.setattr(sqlite_trips, "YIELD_AFTER", budget)
    await _insert(writer, "a")
    ticks = [0]
    ticking = asyncio.create_task(_ticking(ticks))
    try:
        await asyncio.sleep(0)
        del trips[:]
        async with writer.begin() as connection:
            before = ticks[0]
            for name in "bcdef":
                await connection.execute(insert(things).values(name=name))
            await connection.execute(update(things).where(things.c.name == "a").values(name="z"))
            during = ticks[0] - before
            assert trips == []
        assert trips == []  # its commit too
    finally:
        ticking.cancel()
    assert during >= turns if turns else during == 0
    async with writer.connect() as connection:
        assert (await connection.execute(select(things.c.name).order_by(things.c.id))).scalars().all() == list("zbcdef")


async def test_the_writers_statements_of_many_rows_keep_their_trip(writer, trips):
    """An executemany of many rows and a statement of many bound values go to the thread; the rows are as before."""
    await _insert(writer, "a")
    many = [{"name": f"n{i}"} for i in range(sqlite_trips.MANY_ROWS + 3)]
    async with writer.begin() as connection:
        del trips[:]
        await connection.execute(insert(things), many[:2])
        assert trips == []
        await connection.execute(insert(things), many[2:])
        assert trips == ["_trip"]
        ids = list(range(sqlite_trips.MANY_VALUES + 1))
        counted = (await connection.execute(select(things.c.id).where(things.c.id.in_(ids)))).scalars().all()
        assert trips == ["_trip", "_trip"]
        assert (await connection.execute(select(things.c.id).where(things.c.id.in_(ids[:3])))).scalars().all() == [
            1, 2]
        assert trips == ["_trip", "_trip"]
    assert counted == list(range(1, len(many) + 2))


async def test_a_statement_that_held_the_loop_long_keeps_its_trip_from_then_on(writer, trips, monkeypatch):
    """A statement whose text took SLOW_STATEMENT of the loop's CPU (a large read inside a write) is learned and
    sent to the thread the next times; other statements stay on the loop."""
    await _insert(writer, "a")
    monkeypatch.setattr(sqlite_trips, "SLOW_STATEMENT", -1.0)
    async with writer.begin() as connection:
        del trips[:]
        assert (await connection.execute(select(things.c.name))).scalars().all() == ["a"]
        assert trips == []
        monkeypatch.setattr(sqlite_trips, "SLOW_STATEMENT", 60.0)
        assert (await connection.execute(select(things.c.name))).scalars().all() == ["a"]
        assert trips == ["_trip"]
        assert (await connection.execute(select(things.c.id))).scalars().all() == [1]
        assert trips == ["_trip"]


def _wal_frames(path) -> int:
    """The WAL's size in frames now (the wal-index's mxFrame), as WalSize reads it. Its close drops this process's
    SQLite locks on the file (see the test of them below): no other process opens the file in these tests."""
    with open(f"{path}-shm", "rb") as file:
        return sqlite_trips.MX_FRAME.unpack_from(file.read(64), sqlite_trips.MX_FRAME_OFFSET)[0]


async def test_the_writers_wal_is_checkpointed_in_its_thread_where_sqlite_would_have(tmp_path, engine, writer, trips,
                                                                                    monkeypatch):
    """The writer's connection does not checkpoint in its commit on the loop (wal_autocheckpoint=0); after a commit
    that leaves the WAL at CHECKPOINT_PAGES or more, the checkpoint runs in the connection's thread, and the WAL
    starts over: it stays bounded."""
    monkeypatch.setattr(sqlite_trips, "CHECKPOINT_PAGES", 20)
    path = tmp_path / "trips.db"
    async with writer.connect() as connection:
        await connection.execute(text("SELECT 1"))  # the connection made, its pragmas run
        assert (await connection.exec_driver_sql("PRAGMA wal_autocheckpoint")).scalar() == 0
    del trips[:]
    most = 0
    checkpointed = []
    for i in range(200):
        async with writer.begin() as connection:
            await connection.execute(insert(things).values(name=f"{i:04d}" + "x" * 3000))  # a page or more each
        frames = _wal_frames(path)
        most = max(most, frames)
        checkpointed.append((frames >= 20, trips.count("_checkpoint")))
        del trips[:]
    assert all(count == (1 if due else 0) for due, count in checkpointed)  # a trip only where SQLite's was due
    assert sum(count for _, count in checkpointed) >= 10
    assert 20 <= most < 20 + 10  # without the checkpoints, some 600 frames
    async with engine.connect() as connection:
        assert (await connection.execute(select(func.count()).select_from(things))).scalar() == 200


async def test_closing_the_writer_last_removes_the_wal_as_before(tmp_path, engine, writer):
    await engine.dispose()
    await _insert(writer, "a")
    assert (tmp_path / "trips.db-wal").exists()
    await writer.dispose()
    assert not (tmp_path / "trips.db-wal").exists()


# Another process's looks at the database, as an operator's `sqlite3 corral.db` takes them: each opens the file,
# reads and closes it.
LOOKS = ("import sqlite3, sys\nfor _ in range(100):\n    look = sqlite3.connect(sys.argv[1])\n"
         "    look.execute('SELECT count(*) FROM things').fetchall()\n    look.close()")
# Whether another process can take the write lock of the wal-index's dead man's switch (byte 128 of the "-shm" file in
# SQLite's unix VFS), as SQLite does on opening a database that no other process has open, to rebuild that index.
SWITCH_FREE = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR)\n"
               "try:\n    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 128)\nexcept OSError:\n    sys.exit(1)")


async def test_the_writers_commits_keep_sqlites_locks_so_another_process_can_look_at_the_database(tmp_path, engine,
                                                                                                 writer):
    """The writer reads the WAL's size from the "-shm" file after each commit; a POSIX lock is the process's, and
    closing any descriptor of that file drops every lock SQLite holds on it. Without them another process that
    opens the database finds it open nowhere and rebuilds the index under this process's mappings of it: this
    process died of SIGBUS (a controller, while a test wrote to its file)."""
    path = tmp_path / "trips.db"
    await _insert(writer, "a")
    await _insert(writer, "b")  # the second commit reads the size through what the first opened
    assert subprocess.run([sys.executable, "-c", SWITCH_FREE, f"{path}-shm"]).returncode == 1
    looking = subprocess.Popen([sys.executable, "-c", LOOKS, str(path)])
    written, deadline = 0, time.monotonic() + 60
    while looking.poll() is None and time.monotonic() < deadline:  # written to while the other looks
        await _insert(writer, f"c{written}")
        async with engine.connect() as connection:
            await connection.execute(select(things.c.id).limit(1))
        written += 1
    assert looking.wait(1) == 0
    async with engine.connect() as connection:
        assert (await connection.execute(select(func.count()).select_from(things))).scalar() == 2 + written


async def test_a_commit_that_fails_on_the_loop_rolls_back_and_leaves_the_writer_usable(tmp_path, writer):
    """A deferred foreign key broken at the commit: the commit fails, nothing of the transaction is kept, and the
    writer's next transaction goes through on the loop."""
    async with writer.begin() as connection:
        await connection.exec_driver_sql("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
        await connection.exec_driver_sql(
            "CREATE TABLE child (id INTEGER PRIMARY KEY, parent INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY "
            "DEFERRED)")
    with pytest.raises(IntegrityError):
        async with writer.begin() as connection:
            await connection.exec_driver_sql("INSERT INTO child (parent) VALUES (7)")
    async with writer.begin() as connection:
        await connection.exec_driver_sql("INSERT INTO parent (id) VALUES (1)")
        await connection.exec_driver_sql("INSERT INTO child (parent) VALUES (1)")
    async with writer.connect() as connection:
        assert (await connection.exec_driver_sql("SELECT parent FROM child")).scalars().all() == [1]
