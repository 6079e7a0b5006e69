"""The engine's passes over a real store: a handler with no target takes no transaction, an idle pass commits
nothing, and what a pass does is still done (placement, the reaper, the order of the handlers)."""

from __future__ import annotations

import gc
import time
from contextlib import asynccontextmanager

import pytest
from sqlalchemy import event

from corral.core import lifecycle
from corral.core.lifecycle import Target
from corral.core.retries import RetryState
from corral.engine import loop
from corral.engine.cancel import cancel_job
from corral.engine.coordinator import run_handler
from corral.engine.handlers import PrepareJobs, ScheduleJobs
from corral.engine.loop import Engine, WorkerSignals
from corral.metrics import TRANSITIONS
from corral.store.schema import jobs
from corral.store.worker_state import silent_workers
from tests.store.helpers import NOW, add_worker, job, job_history, job_tasks, report, submit
from tests.store.test_launches import launch

REPORTED = ("BUILDING", "PREPARED", "RUNNING", "SUCCEEDED")  # a task's way on its worker, in one heartbeat


@pytest.fixture
def engine(store):
    engine = Engine(store, WorkerSignals(), loss_timeout=30.0, heartbeat_interval=0.5, lost_retention=3600.0)
    engine.reap_after = 0.0  # no grace: the reaper is due from the first pass
    return engine


@pytest.fixture
def writes(store, monkeypatch) -> list[int]:
    """One entry per write transaction the store is asked for."""
    taken: list[int] = []
    write = store.write

    @asynccontextmanager
    async def counted(handler=None):
        taken.append(1)
        async with write(handler) as connection:
            yield connection

    monkeypatch.setattr(store, "write", counted)
    return taken


async def run_to_idle(engine: Engine) -> int:
    """Passes until one changes nothing, as the loop runs them; returns how many changed something."""
    for changing in range(20):
        if not await engine.run_pass():
            return changing
    raise AssertionError("the passes did not reach a fixed point")


async def test_an_idle_pass_takes_no_write_transaction(engine, writes):
    await add_worker(engine.store, now=time.time())
    writes.clear()
    assert not await engine.run_pass()
    assert not await engine.run_pass()
    assert writes == []


async def test_a_pass_runs_only_the_handlers_with_targets_and_still_settles_the_job(engine, writes):
    worker = await add_worker(engine.store, now=time.time())
    job_id = await submit(engine.store, now=time.time(), replicas=3)
    writes.clear()
    assert await run_to_idle(engine) >= 1
    assert {(task.state, task.worker_id) for task in await job_tasks(engine.store, job_id)} == {("ASSIGNED", worker)}
    assert (await job(engine.store, job_id)).state == "RUNNING"
    assert 1 <= len(writes) < 4  # placing takes the writer once (ScheduleJobs), not once per handler of each pass
    for task in await job_tasks(engine.store, job_id):
        await report(engine.store, worker, *[(task.id, task.attempt, state, 0) for state in REPORTED], now=time.time())
    await run_to_idle(engine)
    assert (await job(engine.store, job_id)).state == "SUCCEEDED"
    writes.clear()
    assert not await engine.run_pass()
    assert writes == []  # once it has ended, a pass commits nothing


@pytest.fixture
def reads(monkeypatch) -> list[int]:
    """One entry per read of which handlers may have targets."""
    taken: list[int] = []
    present = loop.present_and_retries

    async def counted(connection, job_states, now):
        taken.append(1)
        return await present(connection, job_states, now)

    monkeypatch.setattr(loop, "present_and_retries", counted)
    return taken


async def test_the_pass_after_a_changed_one_starts_from_its_last_read_while_it_is_current(engine, reads):
    await add_worker(engine.store, now=time.time())
    await submit(engine.store, now=time.time())
    assert await engine.run_pass()  # placed: it reads again after that change, for the handlers after it
    reads.clear()
    assert not await engine.run_pass()
    assert reads == []  # nothing was committed since that read: the pass that follows at once starts from it
    reads.clear()
    assert not await engine.run_pass()
    assert reads == [1]  # after a pass that changed nothing (the period's), it reads afresh


async def test_a_commit_or_a_wake_after_a_changed_pass_makes_the_next_one_read_afresh(engine, reads):
    worker = await add_worker(engine.store, now=time.time())
    await submit(engine.store, now=time.time())
    assert await engine.run_pass()
    late = await submit(engine.store, now=time.time())  # committed after the pass's last read
    reads.clear()
    assert await engine.run_pass()
    assert reads[:1] == [1]
    assert {task.worker_id for task in await job_tasks(engine.store, late)} == {worker}  # seen, and placed
    engine.wake()  # as another controller's commit does (store.notify)
    reads.clear()
    assert not await engine.run_pass()
    assert reads == [1]


async def test_the_reaper_takes_the_writer_only_for_a_silent_worker_and_at_most_once_a_period(engine, writes):
    await add_worker(engine.store, now=time.time() - 60)  # past the 30 s loss timeout
    writes.clear()
    assert await engine.run_pass()  # reaped: a change
    assert len(writes) == 1
    async with engine.store.read() as connection:
        assert await silent_workers(connection, time.time()) == []  # LOST now
    await add_worker(engine.store, name="w1", now=time.time() - 60)
    writes.clear()
    assert not await engine.run_pass()  # within the period: the reaper waits for its next turn
    assert writes == []
    engine.reap_after = 0.0
    assert await engine.run_pass()
    assert len(writes) == 1


async def test_a_pass_runs_the_cascade_only_where_a_job_was_launched_by_another(engine, monkeypatch):
    ran: list[str] = []
    run = loop.run_handler

    async def recorded(store, handler, now, errors=None, **rest):
        ran.append(handler.name)
        return await run(store, handler, now, errors, **rest)

    monkeypatch.setattr(loop, "run_handler", recorded)
    await add_worker(engine.store, cpu=8, now=time.time())
    root = await launch(engine.store, None)
    await run_to_idle(engine)
    assert "ScheduleJobs" in ran and "CancelLaunched" not in ran  # no job here was launched by another
    child = await launch(engine.store, root)
    await run_to_idle(engine)
    assert "CancelLaunched" in ran
    async with engine.store.write() as connection:
        await cancel_job(connection, root, time.time())
    await run_to_idle(engine)
    row = await job(engine.store, child)
    assert (row.state, row.cancelled) == ("TERMINATING", True)  # the cascade, through the engine's passes


@pytest.mark.parametrize("collecting", [True, False])
async def test_a_placing_run_decides_with_the_collector_off_and_leaves_it_as_it_was(store, collecting):
    """A ScheduleJobs run pauses the garbage collector while it reads and decides; a run of a handler that does
    not place leaves it alone."""
    seen: list[bool] = []

    class Seeing(ScheduleJobs):
        def execute(self, targets, snapshot):
            seen.append(gc.isenabled())
            return super().execute(targets, snapshot)

    class Promoting(PrepareJobs):
        def execute(self, targets, snapshot):
            seen.append(gc.isenabled())
            return super().execute(targets, snapshot)

    await add_worker(store, cpu=4.0)
    await submit(store, gang=True, replicas=2)
    was = gc.isenabled()
    try:
        gc.enable() if collecting else gc.disable()
        assert [o.result for o in (await run_handler(store, Seeing(), NOW)).outcomes] == ["SUCCESS"]
        assert gc.isenabled() is collecting
        assert [o.result for o in (await run_handler(store, Promoting(), NOW)).outcomes] == ["SUCCESS"]
        assert gc.isenabled() is collecting
    finally:
        gc.enable() if was else gc.disable()
    assert seen == [False, collecting]


async def test_a_placing_run_s_waiting_targets_are_gone_when_it_returns(store):
    """A placing run's report keeps the outcomes that act (the tasks placed), not the skipped ones of the tasks that
    wait for room: those, with their targets, are freed before the collector resumes, which would otherwise walk
    them and move them to its older generations."""
    await add_worker(store, cpu=2.0)
    job_id = await submit(store, replicas=6, resources={"cpu": 1})
    report = await run_handler(store, ScheduleJobs(), NOW)
    assert [o.result for o in report.outcomes] == ["SUCCESS", "SUCCESS"]
    # Targets keep their fields in slots (no weak references): the live ones are found among the collector's objects.
    alive = [o for o in gc.get_objects() if type(o) is Target and o.job_id == job_id]
    assert len(alive) == 2  # the placed ones, in the report


async def test_a_placing_run_makes_no_outcome_for_a_task_that_waits_yet_counts_and_records_its_wait(store, monkeypatch):
    """A task that finds no room needs no outcome object: its job's wait is recorded (then counted again) and the
    skipped result counted in `corral_handler_outcomes` as one per waiting task, as when each had its outcome."""
    made = []

    def counted(*fields, _make=lifecycle._outcome):
        made.append(fields[1])
        return _make(*fields)

    monkeypatch.setattr(lifecycle, "_outcome", counted)
    await add_worker(store, cpu=2.0)
    job_id = await submit(store, replicas=6, resources={"cpu": 1})
    skipped = TRANSITIONS.labels("ScheduleJobs", "SKIPPED")
    before = skipped._value.get()
    await run_handler(store, ScheduleJobs(), NOW)
    await run_handler(store, ScheduleJobs(), NOW + 1)
    assert made == ["SUCCESS", "SUCCESS"]  # the two placed; none for the four that wait, in either run
    assert skipped._value.get() - before == 8
    waits = [(h.message, h.repeats, h.last_at) for h in await job_history(store, job_id)
             if h.result == "SKIPPED" and h.task_id is None]
    assert len(waits) == 1 and waits[0][1:] == (2, NOW + 1)
    assert (await job(store, job_id)).pending_reason == waits[0][0]


async def test_the_run_that_releases_a_gangs_builds_wakes_its_workers(store):
    """PrepareJobs moves only the job (its tasks stay ASSIGNED), yet their build orders appear with it: the workers
    holding them are named to be woken, or their long polls would hear of the builds only when their wait ends."""
    worker = await add_worker(store, now=time.time())
    await submit(store, now=time.time(), replicas=2, gang=True)
    assert (await run_handler(store, ScheduleJobs(), time.time())).workers == {worker}
    prepared = await run_handler(store, PrepareJobs(), time.time())
    assert prepared.changed and prepared.workers == {worker}


# The store's modules whose statements a pass, a handler run and a report run: each made once, not on every call.
MADE_ONCE = ("corral.store.reads", "corral.store.retries", "corral.store.changes", "corral.store.scheduling_reads",
             "corral.store.worker_state", "corral.store.policy")


async def test_a_jobs_passes_and_reports_make_no_statement_the_first_job_made(engine, statements_made):
    """Made afresh, a statement cost more to build and to walk for SQLAlchemy's cache key than to run."""
    worker = await add_worker(engine.store, now=time.time())
    for first in (True, False):
        job_id = await submit(engine.store, now=time.time())
        statements_made.clear()
        engine.reap_after = 0.0  # the reaper's check too (none is silent: it takes no writer)
        await run_to_idle(engine)
        [task] = await job_tasks(engine.store, job_id)
        await report(engine.store, worker, *[(task.id, task.attempt, state, 0) for state in REPORTED], now=time.time())
        await run_to_idle(engine)
        assert (await job(engine.store, job_id)).state == "SUCCEEDED"
        made_here = [made for made in statements_made if made.split(":")[0] in MADE_ONCE]
        assert bool(made_here) is first, made_here


async def test_a_passs_read_of_what_is_present_and_of_retries_due_is_one_statement(engine):
    """It is read at every pass's start and after each run that moves something: one round trip, not two."""
    statements: list[str] = []
    engines = {engine.store.engine.sync_engine, engine.store.writer.sync_engine}

    def listener(connection, cursor, statement, *args) -> None:
        statements.append(statement)

    for each in engines:
        event.listen(each, "before_cursor_execute", listener)
    try:
        assert (await engine._present()).retries is False
        assert len(statements) == 1
        job_id = await submit(engine.store, now=time.time())
        async with engine.store.write() as connection:  # the job ended, armed for a retry
            await connection.execute(jobs.update().where(jobs.c.id == job_id)
                                     .values(state="FAILED", retry_state=RetryState.ARMED))
        statements.clear()
        assert (await engine._present()).retries is True
        assert len(statements) == 1
    finally:
        for each in engines:
            event.remove(each, "before_cursor_execute", listener)


async def test_settling_reads_its_jobs_and_their_task_counts_in_one_statement_on_sqlite(store):
    """SQLite has one writer, so there is nothing to lock: the jobs' rows and their tasks' counts are one read. On
    PostgreSQL the rows are read locked (FOR UPDATE), which a grouped read cannot be: two."""
    worker = await add_worker(store, now=time.time())
    first = await submit(store, now=time.time(), replicas=2)
    second = await submit(store, now=time.time())
    await run_handler(store, ScheduleJobs(), time.time())
    statements: list[str] = []

    def listener(connection, cursor, statement, *args) -> None:
        statements.append(statement)

    event.listen(store.writer.sync_engine, "before_cursor_execute", listener)
    try:
        tasks = [task for job_id in (first, second) for task in await job_tasks(store, job_id)]
        await report(store, worker, *[(task.id, task.attempt, state, 0) for task in tasks[:2] for state in REPORTED],
                     *[(task.id, task.attempt, "RUNNING", 0) for task in tasks[2:]], now=time.time())
    finally:
        event.remove(store.writer.sync_engine, "before_cursor_execute", listener)
    settling = [s for s in statements if "count(" in s.lower() or "jobs.max_task_failures" in s]
    assert len(settling) == (1 if store.is_sqlite else 2), settling
    assert (await job(store, first)).state == "SUCCEEDED"
    assert (await job(store, second)).state == "RUNNING"


async def test_after_a_run_that_moved_something_the_pass_reads_what_is_present_in_that_runs_transaction(
        engine, reads, monkeypatch):
    """Not in a read transaction of its own after the commit: the run's own transaction reads it last."""
    opened: list[int] = []
    read = engine.store.read

    @asynccontextmanager
    async def counted(handler=None):
        opened.append(1)
        async with read(handler) as connection:
            yield connection

    monkeypatch.setattr(engine.store, "read", counted)
    engine.reap_after = time.time() + 3600  # the reaper's own read is not this test's
    worker = await add_worker(engine.store, now=time.time())
    job_id = await submit(engine.store, now=time.time())
    opened.clear()
    reads.clear()
    assert await engine.run_pass()
    assert reads == [1, 1]  # at the start, and once the placing run moved something
    assert opened == [1]  # the first only: the second was the placing run's
    assert {task.worker_id for task in await job_tasks(engine.store, job_id)} == {worker}
    opened.clear()
    assert not await engine.run_pass()  # starts from that read: nothing committed since
    assert opened == []


async def test_a_placing_run_says_whether_its_changes_were_placements_alone(store, monkeypatch):
    """`only_placed`: what lets the loop leave out the pass after it. A Doom (a job whose dependency failed) or a run
    whose targets the batch's limit cut off is not one: the next run may find something to place."""
    now = time.time()
    await add_worker(store, cpu=2, now=now)
    await submit(store, now=now)
    placed = await run_handler(store, ScheduleJobs(), time.time())
    assert placed.changed and placed.only_placed
    first = await submit(store, now=now, resources={"cpu": 64})  # waits for ever: a wait alone is no change
    assert (await run_handler(store, ScheduleJobs(), time.time())).only_placed
    async with store.write() as connection:
        await cancel_job(connection, first, time.time())
    await run_to_idle(Engine(store, WorkerSignals(), 30.0, 0.5, 3600.0))
    assert (await job(store, first)).state == "CANCELLED"
    doomed = await submit(store, now=now, after=[first])
    report_ = await run_handler(store, ScheduleJobs(), time.time())
    assert report_.changed and not report_.only_placed
    assert (await job(store, doomed)).state in ("TERMINATING", "FAILED")
    await submit(store, now=now, replicas=2)
    cut = ScheduleJobs()
    cut.batch_rows = 1  # the first pending task only: the others are left to the next run
    assert not (await run_handler(store, cut, time.time())).only_placed


async def test_a_pass_whose_only_change_was_placing_asks_for_no_pass_after_it(engine, writes):
    worker = await add_worker(engine.store, now=time.time())
    await submit(engine.store, now=time.time())
    assert await engine.run_pass()
    assert not engine.again  # placements alone: the pass after it would find nothing new
    writes.clear()
    assert not await engine.run_pass()
    assert writes == []
    await submit(engine.store, now=time.time(), replicas=2, gang=True)
    assert await engine.run_pass()
    assert engine.again  # PrepareJobs moved the gang: what handlers before it act on may have changed
    del worker

