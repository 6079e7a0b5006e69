"""Several controllers on one PostgreSQL database: one runs a handler at a time, and worker capacity is fenced."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest
from sqlalchemy import update

from corral.core.protocol import TaskReport
from corral.core.states import TaskState
from corral.engine import loop
from corral.engine.coordinator import run_handler
from corral.engine.handlers import ScheduleJobs
from corral.engine.loop import Engine, WorkerSignals
from corral.engine.reports import ingest_heartbeat
from corral.metrics import REGISTRY
from corral.store.changes import ChangeSet, StaleWrite, TaskRow
from corral.store.handler_locks import HandlerBusy
from corral.store.scheduling_reads import capacity_fence
from corral.store.schema import workers
from corral.store.store import Store
from tests.postgres import scratch_database
from tests.store.helpers import NOW, add_worker, job, job_tasks, report, settle, submit


@pytest.fixture
async def two_stores():
    """Two store handles on one scratch database, as two controllers hold them."""
    async with scratch_database() as url:
        first, second = await Store.open(url), await Store.open(url)
        try:
            yield first, second
        finally:
            await first.close()
            await second.close()


async def test_a_handler_lock_is_held_by_one_transaction_at_a_time(two_stores):
    first, second = two_stores
    async with first.write("ScheduleJobs"):
        with pytest.raises(HandlerBusy):
            async with second.write("ScheduleJobs"):
                pass
        async with second.write("PrepareJobs"):
            pass  # another handler is another lock
    async with second.write("ScheduleJobs"):
        pass  # it went with the transaction


async def test_a_busy_run_commits_nothing(two_stores):
    first, second = two_stores
    job_id = await submit(first, resources={"gpu": 1})
    await add_worker(first, gpu=1)
    async with first.write("ScheduleJobs"):
        with pytest.raises(HandlerBusy):
            await run_handler(second, ScheduleJobs(), NOW)
    assert [t.state for t in await job_tasks(first, job_id)] == ["PENDING"]


async def test_two_engines_racing_place_the_task_once(two_stores):
    """Both engines run ScheduleJobs at once on a pool with room for one of two tasks: the loser is busy (never
    fenced off at a row it read, which would mean both ran), and one task is placed, once."""
    first, second = two_stores
    jobs = [await submit(first, resources={"gpu": 1}) for _ in range(2)]
    await settle(first)  # pending: no worker yet
    await add_worker(first, gpu=1)
    results = await asyncio.gather(run_handler(first, ScheduleJobs(), NOW), run_handler(second, ScheduleJobs(), NOW),
                                   return_exceptions=True)
    assert all(not isinstance(r, BaseException) or isinstance(r, HandlerBusy) for r in results), results
    placed = [t for j in jobs for t in await job_tasks(first, j) if t.state == "ASSIGNED"]
    assert len(placed) == 1


async def _place(store: Store, worker: str, task, after: asyncio.Event | None, fenced: asyncio.Event) -> None:
    """One transaction placing `task` on the worker's GPU 0, as a scheduling pass would, fenced before it commits;
    `fenced` is set once its fence passed, before it commits: the second starts then, and waits at the worker's
    row for the first's end."""
    if after is not None:
        await after.wait()
    async with store.write() as connection:
        changes = ChangeSet(NOW)
        row = TaskRow(task.id, task.job_id, task.index, TaskState.PENDING, task.attempt, None)
        row.worker_id = worker
        changes.task_columns(row, worker_id=worker, gpu_ids=[0])
        changes.task(row, TaskState.ASSIGNED, handler="ScheduleJobs")
        changes.new_attempt(row, worker)
        async with capacity_fence(connection, changes.placed_workers):
            await changes.flush(connection)
        fenced.set()


async def test_two_transactions_booking_the_last_gpu_commit_once(two_stores):
    first, second = two_stores
    worker = await add_worker(first, gpu=1)
    jobs = [await submit(first, resources={"gpu": 1}) for _ in range(2)]
    tasks = [(await job_tasks(first, j))[0] for j in jobs]
    first_fenced, second_fenced = asyncio.Event(), asyncio.Event()
    results = await asyncio.wait_for(asyncio.gather(
        _place(first, worker, tasks[0], None, first_fenced),
        _place(second, worker, tasks[1], first_fenced, second_fenced),  # starts while the first holds the rows
        return_exceptions=True), timeout=30)
    assert results[0] is None
    assert isinstance(results[1], StaleWrite) and "over-booked (gpu 0 is held by more than one task)" in str(results[1])
    states = [(await job_tasks(first, j))[0].state for j in jobs]
    assert states == ["ASSIGNED", "PENDING"]


async def test_placing_on_a_worker_under_its_capacity_passes_the_fence(two_stores):
    first, _ = two_stores
    worker = await add_worker(first, gpu=2)
    job_id = await submit(first, resources={"gpu": 1}, replicas=2)
    await settle(first)
    assert [t.gpu_ids for t in await job_tasks(first, job_id)] == [[0], [1]]
    assert {t.worker_id for t in await job_tasks(first, job_id)} == {worker}


def _counted(metric: str, handler: str) -> float:
    return REGISTRY.get_sample_value(metric, {"handler": handler}) or 0.0


async def test_an_engine_finding_a_handler_busy_counts_it_and_looks_again_soon(two_stores):
    first, second = two_stores
    job_id = await submit(first, resources={"gpu": 1})
    await add_worker(first, gpu=1)
    engine = Engine(second, WorkerSignals(), loss_timeout=30.0, heartbeat_interval=0.5, lost_retention=3600.0)
    before = _counted("corral_handler_lock_busy_total", "ScheduleJobs")
    async with first.write("ScheduleJobs"):
        await engine.run_pass()
    assert _counted("corral_handler_lock_busy_total", "ScheduleJobs") == before + 1
    assert engine.busy and engine._idle_timeout() == loop.BUSY_RETRY
    assert [t.state for t in await job_tasks(first, job_id)] == ["PENDING"]
    await engine.run_pass()  # the lock went with the other transaction: this pass places it
    assert not engine.busy
    assert [t.state for t in await job_tasks(first, job_id)] == ["ASSIGNED"]


async def test_a_fenced_off_run_is_one_info_line_and_counted(store, monkeypatch, caplog):
    await submit(store)

    async def fenced(*_args, **_rest):
        raise StaleWrite("tasks: 1 rows changed under us")

    monkeypatch.setattr(loop, "run_handler", fenced)
    engine = Engine(store, WorkerSignals(), loss_timeout=30.0, heartbeat_interval=0.5, lost_retention=3600.0)
    before = _counted("corral_fenced_writes_total", "ScheduleJobs")
    with caplog.at_level(logging.INFO, logger="corral.engine"):
        await engine.run_pass()
    assert _counted("corral_fenced_writes_total", "ScheduleJobs") >= before + 1
    assert all(record.levelno < logging.WARNING and record.exc_info is None for record in caplog.records)
    assert any("ScheduleJobs was fenced off (another controller got there first: tasks: 1 rows changed under us)"
               in record.getMessage() for record in caplog.records)


async def test_an_attempt_placed_twice_is_a_fenced_write_not_a_driver_error(store):
    await add_worker(store)
    job_id = await submit(store)
    await settle(store)
    (task,) = await job_tasks(store, job_id)
    with pytest.raises(StaleWrite, match="attempts: "):
        async with store.write() as connection:
            changes = ChangeSet(NOW)
            changes.new_attempt(TaskRow(task.id, job_id, 0, TaskState(task.state), task.attempt, task.worker_id),
                                task.worker_id)
            await changes.flush(connection)


async def _last_report(store: Store, worker: str, task, read: asyncio.Event, other_read: asyncio.Event) -> None:
    """A heartbeat ending `task`, on its own controller: `read` is set once it settled the job (before it commits);
    it then waits, at most a second, for the other heartbeat to have settled too before committing."""
    async with store.write() as connection:
        await ingest_heartbeat(connection, worker, [TaskReport(task_id=task.id, attempt=task.attempt,
                                                               state="SUCCEEDED", exit_code=0, at=NOW)], NOW)
        read.set()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                await other_read.wait()


async def test_two_workers_ending_the_last_tasks_of_a_job_at_once_end_the_job(two_stores):
    """Each heartbeat, on another controller, ends one of the job's two tasks. Were each to settle the job from the
    rows as they were before the other committed, each would see the other task running and the job would stay
    RUNNING for ever; the job's row is locked before its tasks are counted, so the second counts the first's end."""
    first, second = two_stores
    workers = [await add_worker(first, name=f"w{i}", cpu=1.0) for i in range(2)]
    job_id = await submit(first, replicas=2, resources={"cpu": 1})
    await settle(first)
    placed = await job_tasks(first, job_id)
    for task in placed:
        await report(first, task.worker_id, (task.id, task.attempt, "BUILDING"), (task.id, task.attempt, "PREPARED"))
        await settle(first)
        await report(first, task.worker_id, (task.id, task.attempt, "RUNNING"))
    assert sorted(task.worker_id for task in placed) == sorted(workers)
    first_read, second_read = asyncio.Event(), asyncio.Event()
    await asyncio.wait_for(asyncio.gather(
        _last_report(first, placed[0].worker_id, placed[0], first_read, second_read),
        _last_report(second, placed[1].worker_id, placed[1], second_read, first_read)), timeout=30)
    assert (await job(first, job_id)).state == "SUCCEEDED"


async def _cross(store: Store, rows: tuple[str, str], holding: asyncio.Event, other_holding: asyncio.Event) -> None:
    """A transaction taking the rows of two workers in the order given, the second once the other one holds its
    first: two of them in opposite orders wait on each other."""
    async with store.write() as connection:
        await connection.execute(update(workers).where(workers.c.id == rows[0]).values(last_heartbeat=NOW + 1))
        holding.set()
        await other_holding.wait()
        await connection.execute(update(workers).where(workers.c.id == rows[1]).values(last_heartbeat=NOW + 2))


async def test_a_transaction_postgresql_rolls_back_to_break_a_deadlock_is_a_fenced_write(two_stores):
    first, second = two_stores
    ids = (await add_worker(first, name="w0"), await add_worker(first, name="w1"))
    first_holding, second_holding = asyncio.Event(), asyncio.Event()
    results = await asyncio.wait_for(asyncio.gather(
        _cross(first, ids, first_holding, second_holding),
        _cross(second, ids[::-1], second_holding, first_holding), return_exceptions=True), timeout=30)
    assert sorted(type(result).__name__ for result in results) == ["NoneType", "StaleWrite"], results
    lost = next(result for result in results if result is not None)
    assert "deadlock detected" in str(lost)
