"""The event stream read out of the history table, on both stores: typing, ranges, gaps and pruning."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import event, insert

from corral.controller import events as event_stream
from corral.controller.events import EventHub, follow_events
from corral.core.states import TaskState
from corral.engine.cancel import cancel_job
from corral.store.events import (
    Horizon,
    StreamStart,
    latest_id,
    prune_events,
    read_events,
    read_horizon,
    stream_start,
)
from corral.store.schema import history
from tests.store.helpers import NOW, add_worker, job, job_tasks, reap, report, settle, submit


async def _events(store, after=0, job_id=None, upto=None):
    async with store.read() as connection:
        return await read_events(connection, after, job_id, upto=upto)


@contextmanager
def statements_run(store) -> Iterator[list[str]]:
    """The statements the store's readers run within."""
    statements: list[str] = []

    def note(_connection, _cursor, statement, *_rest) -> None:
        statements.append(statement)

    event.listen(store.engine.sync_engine, "before_cursor_execute", note)
    try:
        yield statements
    finally:
        event.remove(store.engine.sync_engine, "before_cursor_execute", note)


async def test_a_job_story_and_its_workers_arrive_typed_and_in_order(store):
    worker = await add_worker(store)
    job_id = await submit(store)
    await settle(store)
    (task,) = await job_tasks(store, job_id)
    await report(store, worker, (task.id, 0, TaskState.BUILDING), (task.id, 0, TaskState.PREPARED))
    await settle(store)
    events = await _events(store)
    assert [e.id for e in events] == sorted(e.id for e in events)
    assert events[0].type == "worker.registered" and events[0].worker_id == worker and events[0].job_id is None
    assert events[1].type == "job.submitted" and events[1].job_id == job_id
    assigned = next(e for e in events if e.to_state == TaskState.ASSIGNED)
    assert (assigned.type, assigned.task_index, assigned.attempt, assigned.worker_id) == (
        "task.state_changed", 0, 0, worker)
    assert {e.type for e in events} >= {"task.state_changed", "job.state_changed"}


async def test_a_lost_worker_is_an_event_before_the_failures_it_causes(store):
    worker = await add_worker(store)
    job_id = await submit(store)
    await settle(store)
    await reap(store, NOW + 100)
    events = await _events(store)
    lost = next(e for e in events if e.type == "worker.lost")
    failed = next(e for e in events if e.to_state == TaskState.WORKER_FAILED)
    assert (lost.worker_id, lost.from_state, lost.to_state) == (worker, "ALIVE", "LOST")
    assert lost.id < failed.id and failed.job_id == job_id


async def test_reads_resume_after_an_id_and_filter_by_job(store):
    first, second = await submit(store, project="vision"), await submit(store)
    every = await _events(store)
    assert [e.job_id for e in every] == [first, second]
    assert [e.job_id for e in await _events(store, after=every[0].id)] == [second]
    assert [e.job_id for e in await _events(store, job_id=first)] == [first]
    assert await _events(store, upto=every[0].id) == every[:1]
    async with store.read() as connection:
        assert await latest_id(connection) == every[-1].id
        assert (await stream_start(connection, 1)).after_last == every[-1].id - 1
        assert (await stream_start(connection, 1, first)).after_last == every[0].id - 1
        assert (await stream_start(connection, 50)).after_last == every[0].id - 1


async def test_a_streams_start_is_one_statement_of_one_moment(store):
    """Where the last events begin, the newest id and the job's state and project: what opening a stream reads, in
    one round trip to the store."""
    async with store.read() as connection:
        assert await stream_start(connection, 5, 1) == StreamStart(0, 0, None, None)  # no event yet, no such job
    first, second = await submit(store, project="vision"), await submit(store)
    every = await _events(store)
    with statements_run(store) as statements:
        async with store.read() as connection:
            opened = await stream_start(connection, 1, first)
    assert opened == StreamStart(every[0].id - 1, every[-1].id, "PENDING", "vision")
    assert len(statements) == 1
    async with store.read() as connection:
        assert await stream_start(connection, None, second) == StreamStart(None, every[-1].id, "PENDING", "default")
        assert await stream_start(connection, 3) == StreamStart(every[0].id - 1, every[-1].id, None, None)


async def test_a_young_row_after_a_gap_is_held_at_the_horizon(store):
    """On PostgreSQL only: on SQLite a row commits after every row of a lower id, so no gap is filled later."""
    await submit(store)
    async with store.read() as connection:
        newest = await latest_id(connection)
        assert (await read_horizon(connection, 0, NOW, 5.0)).safe is None  # contiguous
    async with store.write() as connection:
        await connection.execute(insert(history).values(
            id=newest + 2, at=NOW, job_id=None, handler="Test", result="SUCCESS"))
    sqlite = store.engine.dialect.name == "sqlite"
    with statements_run(store) as statements:
        async with store.read() as connection:
            assert await read_horizon(connection, 0, NOW + 1, 5.0) == Horizon(None if sqlite else newest, newest + 2)
    # PostgreSQL: the young rows, the id below them and the newest, one round trip at every commit; SQLite: the newest
    assert len(statements) == 1
    if sqlite:
        assert "WHERE" not in statements[0]  # not the young rows: the newest id alone
    async with store.read() as connection:
        assert (await read_horizon(connection, 0, NOW + 10, 5.0)).safe is None  # settled: the gap is skipped


async def test_pruning_keeps_active_jobs_and_the_newest_row_and_ids_keep_growing(store):
    await add_worker(store, cpu=1)
    ended = await submit(store, resources={"cpu": 64})  # never fits; cancelled while PENDING, it ends at once
    active = await submit(store, resources={"cpu": 64})
    await settle(store)
    async with store.write() as connection:
        await cancel_job(connection, ended, NOW)
    assert (await job(store, ended)).state == "CANCELLED"
    async with store.read() as connection:
        newest = await latest_id(connection)
    async with store.write() as connection:
        pruned = await prune_events(connection, NOW + 3600)
    left = await _events(store)
    assert pruned > 0
    assert {e.job_id for e in left} == {active, ended} and [e.id for e in left if e.job_id == ended] == [newest]
    assert not any(e.type == "worker.registered" for e in left)
    async with store.write() as connection:
        assert await prune_events(connection, NOW - 3600) == 0  # nothing that old
    await submit(store)
    async with store.read() as connection:
        assert await latest_id(connection) > newest


async def test_a_narrowed_stream_moves_past_the_events_it_leaves_out(store, monkeypatch):
    """A member's stream (narrowed to its projects) must not read the other projects' events again at every wake:
    it would read more and more of them as the cluster runs."""
    reads_after = []

    async def reading(connection, after, *args, **kwargs):
        reads_after.append(after)
        return await read_events(connection, after, *args, **kwargs)

    monkeypatch.setattr("corral.controller.events.read_events", reading)
    ours = await submit(store, project="vision")
    stream = follow_events(store, EventHub(), 0, projects={"vision"}, idle=0.01)
    assert {e.job_id for e in await anext(stream)} == {ours}
    for _ in range(3):
        await submit(store, project="audio")
    async with store.read() as connection:
        newest = await latest_id(connection)
    with statements_run(store) as statements:
        assert await anext(stream) == []  # nothing of its projects
    assert len(statements) == 2  # the horizon with the newest id, then the events: two round trips a wake
    later = await submit(store, project="vision")
    assert {e.job_id for e in await anext(stream)} == {later}
    assert newest in reads_after  # it read on from past the audio jobs' events, not from its own last one
    await stream.aclose()


async def test_a_ring_after_a_quiet_spell_is_read_at_once_and_a_burst_once_per_period(store, monkeypatch):
    """A commit after a quiet spell (a job's end) reaches the stream at once, not COALESCE later; commits closer
    together than COALESCE still cost one read per COALESCE."""
    now = [1000.0]
    pauses = []
    real_sleep = asyncio.sleep

    async def pause(seconds):
        pauses.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(event_stream, "clock", lambda: now[0])
    monkeypatch.setattr(asyncio, "sleep", pause)
    hub = EventHub()
    store.on_commit.append(hub.ring)
    stream = follow_events(store, hub, 0, idle=60)
    first = await submit(store)
    async with asyncio.timeout(10):
        assert {e.job_id for e in await anext(stream)} == {first}
        now[0] += event_stream.COALESCE + 1  # quiet since that read
        later = await submit(store)
        assert {e.job_id for e in await anext(stream)} == {later}
        assert pauses == [0.0]
        now[0] += event_stream.COALESCE / 4  # a burst: the next commit comes soon after that read
        last = await submit(store)
        assert {e.job_id for e in await anext(stream)} == {last}
    assert pauses == [0.0, pytest.approx(event_stream.COALESCE * 3 / 4)]
    await stream.aclose()
