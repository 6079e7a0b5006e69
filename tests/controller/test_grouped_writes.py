"""GroupedWrites: concurrent writes committed together, each answered once its own is committed, a failing one
failing alone."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import event, text

from corral.controller.grouped_writes import GroupedWrites
from corral.controller.jobs_api import Submission, write_submissions
from corral.core.spec import JobSpec
from corral.store.database import Conflict
from corral.store.job_views import existing_job_ids
from corral.store.jobs import insert_job
from tests.postgres import opened_store


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request, tmp_path):
    async with opened_store(request.param, tmp_path) as opened:
        yield opened


def _job(key: str):
    async def write(connection):
        return await insert_job(connection, JobSpec(command=["true"]), key, 1.0)
    return write


async def test_concurrent_writes_share_commits_and_each_gets_its_own_result(store) -> None:
    commits = []
    store.on_commit.append(lambda: commits.append(1))
    grouped = GroupedWrites(store)
    ids = await asyncio.wait_for(asyncio.gather(*(grouped.write(_job(f"k{i}")) for i in range(20))), 30)
    assert len(set(ids)) == 20
    assert len(commits) < 20  # those that came while one was written went in the next, together
    async with store.read() as connection:
        assert await existing_job_ids(connection, ids) == set(ids)


async def test_the_writes_that_come_while_a_group_waits_for_the_writer_go_in_that_group(store) -> None:
    """A group is taken once the writer is held: a write that comes while another transaction holds the writer (a
    placing run) goes in the same transaction as the writes that came before it, not in one after theirs."""
    grouped = GroupedWrites(store)
    commits = []
    async with store.write():  # another transaction holds the writer
        first = asyncio.ensure_future(grouped.write(_job("k0")))
        for _ in range(5):
            await asyncio.sleep(0)  # the group's writer is started and waits for the writer
        rest = [asyncio.ensure_future(grouped.write(_job(f"k{i}"))) for i in range(1, 5)]
    store.on_commit.append(lambda: commits.append(1))  # the holder's commit is done; nothing else ran since
    ids = await asyncio.wait_for(asyncio.gather(first, *rest), 30)
    assert len(set(ids)) == 5
    assert len(commits) == 1


async def test_a_group_whose_writer_fails_before_it_is_taken_fails_alone(store, monkeypatch) -> None:
    """Where the writer itself fails (before the group is taken), the calls waiting then are its group: each is
    answered, a lone one with the failure, several by writing each alone."""
    grouped = GroupedWrites(store)
    write = store.write
    calls = []

    def failing_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise OSError("no writer")
        return write(*args, **kwargs)

    monkeypatch.setattr(store, "write", failing_once)
    with pytest.raises(OSError):
        await asyncio.wait_for(grouped.write(_job("alone")), 30)
    calls.clear()
    ids = await asyncio.wait_for(asyncio.gather(*(grouped.write(_job(f"k{i}")) for i in range(3))), 30)
    assert len(set(ids)) == 3 and len(calls) == 4  # the failed group's, then one each


async def test_the_waiting_writes_of_a_stores_grouped_writes_share_one_transaction(store) -> None:
    """Submissions and reports (two GroupedWrites of one store) waiting when the writer is taken are written in one
    transaction, each kind by its own write_group; a failing one fails alone, the others committed."""
    async def tagged(connection, items):
        return [("tagged", await item(connection)) for item in items]

    plain, other = GroupedWrites(store), GroupedWrites(store, tagged)
    commits = []
    async with store.write():  # another transaction holds the writer
        calls = [asyncio.ensure_future(plain.write(_job(f"p{i}"))) for i in range(3)]
        calls += [asyncio.ensure_future(other.write(_job(f"o{i}"))) for i in range(3)]
        for _ in range(5):
            await asyncio.sleep(0)
    store.on_commit.append(lambda: commits.append(1))
    results = await asyncio.wait_for(asyncio.gather(*calls), 30)
    assert all(isinstance(r, int) for r in results[:3]) and all(tag == "tagged" for tag, _ in results[3:])
    assert len(commits) == 1
    taken = await plain.write(_job("taken"))
    async with store.write():
        calls = [asyncio.ensure_future(plain.write(_job("taken")))]
        calls += [asyncio.ensure_future(other.write(_job(f"o{i}"))) for i in range(3, 5)]
        for _ in range(5):
            await asyncio.sleep(0)
    commits.clear()
    results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 30)
    assert isinstance(results[0], Conflict) and [tag for tag, _ in results[1:]] == ["tagged", "tagged"]
    assert len(commits) == 2  # the failed group's rolled back, then the two others alone
    async with store.read() as connection:
        assert await existing_job_ids(connection, [taken, *(i for _, i in results[1:])]) == {
            taken, *(i for _, i in results[1:])}


async def test_a_failing_write_fails_alone_and_the_others_of_its_group_are_committed(store) -> None:
    grouped = GroupedWrites(store)
    first = await grouped.write(_job("taken"))
    results = await asyncio.wait_for(asyncio.gather(
        *(grouped.write(_job("taken" if i == 3 else f"k{i}")) for i in range(8)), return_exceptions=True), 30)
    assert isinstance(results[3], Conflict)
    made = [r for i, r in enumerate(results) if i != 3]
    assert all(isinstance(job_id, int) for job_id in made)
    async with store.read() as connection:
        assert await existing_job_ids(connection, [first, *made]) == {first, *made}


def _submission(name: str, now: float, key: str | None = None, replicas: int = 1):
    """A call's submission of one job, its audit row naming the job it made."""
    spec = JobSpec(command=["true"], name=name, replicas=replicas)
    return Submission([spec], [key], {spec.project: []}, "admin", None, now,
                      lambda ids: [dict(at=now, actor="admin", action="job.submit", object=f"job {ids[0]}",
                                        job_id=ids[0], outcome=201, detail={"name": name})])


async def test_concurrent_submissions_are_written_by_one_set_of_statements_in_their_calls_order(store) -> None:
    """Each table's rows in the calls' order, each job's rows at its own call's time, as one call after the other
    would write them; four statements for the group's jobs, tasks, history and audit, not four a call."""
    statements = []
    event.listen(store.writer.sync_engine, "before_cursor_execute",
                 lambda *args: statements.append(args[2].split()[0:3]))
    grouped = GroupedWrites(store, write_submissions)
    calls = [_submission(f"j{i}", 100.0 + i, replicas=1 + i % 2) for i in range(8)]
    written = await asyncio.wait_for(asyncio.gather(*(grouped.write(call) for call in calls)), 30)
    ids = [own[0]["id"] for _, own in written]
    assert ids == sorted(ids) and [new[0].spec.name for new, _ in written] == [f"j{i}" for i in range(8)]
    inserts = [words[2] for words in statements if words[:2] == ["INSERT", "INTO"]]
    assert inserts.count("jobs") == inserts.count("tasks") == inserts.count("history") < 8
    async with store.read() as connection:
        made = (await connection.execute(text("SELECT id, name, created_at FROM jobs ORDER BY id"))).all()
        tasks = (await connection.execute(text("SELECT job_id, state_since FROM tasks ORDER BY id"))).all()
        history = (await connection.execute(text("SELECT job_id, at FROM history ORDER BY id"))).all()
        audit = (await connection.execute(text("SELECT job_id, object FROM audit ORDER BY id"))).all()
    assert [tuple(row) for row in made] == [(job_id, f"j{i}", 100.0 + i) for i, job_id in enumerate(ids)]
    assert [tuple(row) for row in tasks] == [(job_id, 100.0 + i) for i, job_id in enumerate(ids)
                                             for _ in range(1 + i % 2)]
    assert [tuple(row) for row in history] == [(job_id, 100.0 + i) for i, job_id in enumerate(ids)]
    assert [tuple(row) for row in audit] == [(job_id, f"job {job_id}") for job_id in ids]


async def test_a_submission_whose_key_is_taken_fails_alone_and_writes_nothing(store) -> None:
    grouped = GroupedWrites(store, write_submissions)
    await grouped.write(_submission("first", 1.0, key="taken"))
    results = await asyncio.wait_for(asyncio.gather(
        *(grouped.write(_submission(f"j{i}", 2.0, key="taken" if i == 3 else None)) for i in range(8)),
        return_exceptions=True), 30)
    assert isinstance(results[3], Conflict)
    made = [result[1][0]["id"] for i, result in enumerate(results) if i != 3]
    async with store.read() as connection:
        assert await existing_job_ids(connection, made) == set(made)
        counts = [(await connection.execute(text(f"SELECT count(*) FROM {table}"))).scalar()  # noqa: S608
                  for table in ("jobs", "history", "audit")]
    assert counts == [8, 8, 8]  # the first, and the seven others: nothing of the refused one


async def test_a_groups_four_statements_run_in_one_greenlet(store, monkeypatch) -> None:
    """SQLAlchemy's asyncio layer spawns a greenlet for each statement executed on its own; the group's jobs, tasks,
    history and audit statements run inside one `run_sync`: one spawn, not four."""
    from sqlalchemy.ext.asyncio import engine as asyncio_engine

    spawned = []
    spawn = asyncio_engine.greenlet_spawn

    async def counted(fn, *args, **kwargs):
        spawned.append(fn)
        return await spawn(fn, *args, **kwargs)

    statements = []
    event.listen(store.writer.sync_engine, "before_cursor_execute",
                 lambda *args: statements.append(args[2].split()[0:3]))
    async with store.write() as connection:
        monkeypatch.setattr(asyncio_engine, "greenlet_spawn", counted)
        written = await write_submissions(connection, [_submission("a", 1.0, replicas=2), _submission("b", 2.0)])
        monkeypatch.undo()
    assert [[row["name"] for row in own] for _, own in written] == [["a"], ["b"]]
    assert [words[2] for words in statements if words[:2] == ["INSERT", "INTO"]] == ["jobs", "tasks", "history",
                                                                                      "audit"]
    assert len(spawned) == 1
