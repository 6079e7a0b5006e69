"""The engine over a real store: placement, the gang barrier, budgets, loss, cancel, fencing."""

from __future__ import annotations

import pytest
from sqlalchemy import event, select

from corral.core.states import TaskState
from corral.engine.cancel import AlreadyEnded, cancel_job
from corral.engine.coordinator import run_handler
from corral.engine.handlers import ScheduleJobs
from corral.store import changes
from corral.store.changes import ALIKE_FROM, ChangeSet, StaleWrite, TaskRow
from corral.store.database import migrate
from corral.store.schema import tasks
from tests.store.helpers import (
    NOW,
    acknowledge,
    add_worker,
    job,
    job_history,
    job_tasks,
    reap,
    report,
    run_task,
    settle,
    submit,
    task_attempts,
)


async def test_migrations_are_idempotent(store):
    await migrate(store.engine)
    await migrate(store.engine)
    assert await submit(store) == 1


async def test_a_job_runs_to_success_with_every_step_in_history(store):
    worker = await add_worker(store)
    job_id = await submit(store)
    await settle(store)
    (task,) = await job_tasks(store, job_id)
    assert task.state == "ASSIGNED" and task.worker_id == worker
    await run_task(store, worker, task)
    assert (await job(store, job_id)).state == "SUCCEEDED"
    steps = [(h.handler, h.from_state, h.to_state) for h in await job_history(store, job_id) if h.task_id]
    assert steps == [
        ("ScheduleJobs", "PENDING", "ASSIGNED"), ("Worker", "ASSIGNED", "BUILDING"),
        ("Worker", "BUILDING", "PREPARED"), ("Worker", "PREPARED", "RUNNING"),  # no start order to wait for
        ("Worker", "RUNNING", "SUCCEEDED"),
    ]
    (attempt,) = await task_attempts(store, task.id)
    assert (attempt.state, attempt.exit_code, attempt.worker_id) == ("SUCCEEDED", 0, worker)


async def test_placement_never_books_a_worker_twice_and_explains_the_wait(store):
    await add_worker(store, cpu=2)
    first = await submit(store, resources={"cpu": 2})
    second = await submit(store, resources={"cpu": 1})
    await settle(store)
    await settle(store)  # a second pass must not place into room already taken
    assert [t.state for t in await job_tasks(store, first)] == ["ASSIGNED"]
    assert [t.state for t in await job_tasks(store, second)] == ["PENDING"]
    waiting = await job(store, second)
    assert waiting.pending_reason == "needs 1 cpu on one worker; no worker has any cpu free"
    skipped = [h for h in await job_history(store, second) if h.result == "SKIPPED"]
    assert len(skipped) == 1  # a wait is recorded once, not on every pass


async def test_failure_budget_gives_three_attempts_then_failed(store):
    worker = await add_worker(store)
    job_id = await submit(store, max_retries_failure=2)
    for _ in range(3):
        await settle(store)
        (task,) = await job_tasks(store, job_id)
        await run_task(store, worker, task, exit_code=3)
    (task,) = await job_tasks(store, job_id)
    assert (task.state, task.failures, task.attempt) == ("FAILED", 3, 2)
    assert [a.state for a in await task_attempts(store, task.id)] == ["FAILED"] * 3
    assert (await job(store, job_id)).state == "FAILED"


async def test_gang_starts_only_when_every_member_is_prepared(store):
    worker = await add_worker(store)
    job_id = await submit(store, replicas=2, gang=True)
    await settle(store)
    assert (await job(store, job_id)).state == "PREPARING"
    first, second = await job_tasks(store, job_id)
    await report(store, worker, (first.id, 0, "BUILDING"), (first.id, 0, "PREPARED"))
    await settle(store)
    assert [t.state for t in await job_tasks(store, job_id)] == ["PREPARED", "ASSIGNED"]
    await report(store, worker, (second.id, 0, "BUILDING"), (second.id, 0, "PREPARED"))
    await settle(store)
    assert [t.state for t in await job_tasks(store, job_id)] == ["STARTING", "STARTING"]
    assert (await job(store, job_id)).state == "STARTING"


async def test_a_gang_that_does_not_fit_whole_is_not_placed_at_all(store):
    await add_worker(store, cpu=1)
    job_id = await submit(store, replicas=2, gang=True)
    await settle(store)
    assert [t.state for t in await job_tasks(store, job_id)] == ["PENDING", "PENDING"]
    assert "gang of 2" in (await job(store, job_id)).pending_reason


async def test_lost_worker_fails_its_tasks_which_retry_elsewhere(store):
    lost = await add_worker(store, name="a", cpu=1)
    job_id = await submit(store)
    await settle(store)
    (task,) = await job_tasks(store, job_id)
    await report(store, lost, (task.id, 0, "BUILDING"), (task.id, 0, "PREPARED"))
    await settle(store)
    await report(store, lost, (task.id, 0, "RUNNING"))
    other = await add_worker(store, name="b", cpu=1, now=NOW + 40)
    await reap(store, now=NOW + 40)
    await settle(store, now=NOW + 40)
    (task,) = await job_tasks(store, job_id)
    assert (task.state, task.worker_id, task.attempt, task.preemptions) == ("ASSIGNED", other, 1, 1)
    assert [a.state for a in await task_attempts(store, task.id)] == ["WORKER_FAILED", "ASSIGNED"]


async def test_cancel_kills_pending_tasks_and_stops_placed_ones(store):
    worker = await add_worker(store, cpu=1)
    job_id = await submit(store, replicas=2)
    await settle(store)
    async with store.write() as connection:
        await cancel_job(connection, job_id, NOW)
    await settle(store)
    placed, queued = await job_tasks(store, job_id)
    assert (placed.state, queued.state) == ("TERMINATING", "KILLED")
    assert (await job(store, job_id)).state == "TERMINATING"
    await report(store, worker, (placed.id, 0, "KILLED"))
    await settle(store)
    assert (await job(store, job_id)).state == "CANCELLED"
    with pytest.raises(AlreadyEnded):
        async with store.write() as connection:
            await cancel_job(connection, job_id, NOW)


async def test_stale_and_repeated_reports_change_nothing(store):
    worker = await add_worker(store)
    job_id = await submit(store)
    await settle(store)
    (task,) = await job_tasks(store, job_id)
    await report(store, worker, (task.id, 7, "BUILDING"))  # an attempt that is not the current one
    assert (await job_tasks(store, job_id))[0].state == "ASSIGNED"
    await report(store, worker, (task.id, 0, "BUILDING"))
    await report(store, worker, (task.id, 0, "BUILDING"))
    assert len([h for h in await job_history(store, job_id) if h.to_state == "BUILDING"]) == 1


async def test_a_write_against_a_stale_read_is_refused_whole(store):
    await add_worker(store)
    job_id = await submit(store, replicas=2)
    first, second = await job_tasks(store, job_id)
    changes = ChangeSet(NOW)
    changes.task(TaskRow(first.id, job_id, 0, TaskState.PENDING, 0, None), TaskState.KILLED, handler="Settle")
    changes.task(TaskRow(second.id, job_id, 1, TaskState.ASSIGNED, 0, "w"), TaskState.BUILDING, handler="Worker")
    with pytest.raises(StaleWrite):
        async with store.write() as connection:
            await changes.flush(connection)
    async with store.read() as connection:
        states = (await connection.execute(select(tasks.c.state).where(tasks.c.job_id == job_id))).scalars().all()
    assert states == ["PENDING", "PENDING"]


async def test_unschedulable_after_the_scheduling_timeout(store):
    job_id = await submit(store, scheduling_timeout=60)
    await settle(store, now=NOW + 30)
    assert (await job(store, job_id)).state == "PENDING"
    await settle(store, now=NOW + 61)
    assert (await job(store, job_id)).state == "UNSCHEDULABLE"
    assert [t.state for t in await job_tasks(store, job_id)] == ["UNSCHEDULABLE"]


async def test_a_failed_gang_member_with_no_retry_left_drains_its_siblings_and_the_gang_fails(store):
    worker = await add_worker(store)
    job_id = await submit(store, replicas=2, gang=True)
    await settle(store)
    first, second = await job_tasks(store, job_id)
    for task in (first, second):
        await report(store, worker, (task.id, 0, "BUILDING"), (task.id, 0, "PREPARED"))
    await settle(store)
    await report(store, worker, (first.id, 0, "RUNNING"), (second.id, 0, "RUNNING"))
    await settle(store)
    assert (await job(store, job_id)).state == "RUNNING"
    await report(store, worker, (first.id, 0, "FAILED", 1))
    await settle(store)
    assert [t.state for t in await job_tasks(store, job_id)] == ["FAILED", "PREEMPTING"]
    assert (await job(store, job_id)).state == "DRAINING"
    await acknowledge(store, worker, second)
    await settle(store)
    assert [t.state for t in await job_tasks(store, job_id)] == ["FAILED", "PREEMPTED"]
    assert (await job(store, job_id)).state == "FAILED"


async def test_a_gang_whose_members_all_succeed_succeeds_even_if_they_end_apart(store):
    worker = await add_worker(store)
    job_id = await submit(store, replicas=2, gang=True)
    await settle(store)
    first, second = await job_tasks(store, job_id)
    for task in (first, second):
        await report(store, worker, (task.id, 0, "BUILDING"), (task.id, 0, "PREPARED"))
    await settle(store)
    await report(store, worker, (first.id, 0, "RUNNING"), (second.id, 0, "RUNNING"), (first.id, 0, "SUCCEEDED", 0))
    await settle(store)
    assert [t.state for t in await job_tasks(store, job_id)] == ["SUCCEEDED", "RUNNING"]
    await report(store, worker, (second.id, 0, "SUCCEEDED", 0))
    await settle(store)
    assert (await job(store, job_id)).state == "SUCCEEDED"


async def test_max_task_failures_fails_the_job_and_kills_the_rest(store):
    worker = await add_worker(store, cpu=2)
    job_id = await submit(store, replicas=4, max_task_failures=1)
    await settle(store)
    placed = [t for t in await job_tasks(store, job_id) if t.state == "ASSIGNED"]
    assert len(placed) == 2
    await run_task(store, worker, placed[0], exit_code=1)
    assert (await job(store, job_id)).state == "RUNNING"  # one failure is tolerated
    await settle(store)
    placed = [t for t in await job_tasks(store, job_id) if t.state == "ASSIGNED"]
    await run_task(store, worker, placed[0], exit_code=1)
    states = [t.state for t in await job_tasks(store, job_id)]
    assert (await job(store, job_id)).state == "TERMINATING"
    assert states.count("FAILED") == 2 and "PENDING" not in states
    for task in await job_tasks(store, job_id):
        if task.state == "TERMINATING":
            await report(store, worker, (task.id, task.attempt, "KILLED"))
    await settle(store)
    assert (await job(store, job_id)).state == "FAILED"


async def test_every_wait_is_on_record_and_one_that_repeats_is_counted_not_copied(store):
    job_id = await submit(store, resources={"cpu": 2})  # no worker yet
    for second in range(3):
        await run_handler(store, ScheduleJobs(), NOW + second)
    waits = [h for h in await job_history(store, job_id) if h.result == "SKIPPED"]
    assert [(w.repeats, w.last_at) for w in waits] == [(3, NOW + 2)]
    await add_worker(store, cpu=1)  # a new reason: the only worker is too small
    await run_handler(store, ScheduleJobs(), NOW + 3)
    waits = [h for h in await job_history(store, job_id) if h.result == "SKIPPED"]
    assert [w.repeats for w in waits] == [3, 1] and waits[0].message != waits[1].message


async def test_waits_seen_again_are_counted_in_one_statement_each_on_its_own_record(store):
    first = await submit(store, resources={"cpu": 2})  # no worker yet
    second = await submit(store, resources={"cpu": 2})
    await run_handler(store, ScheduleJobs(), NOW)
    statements: list[str] = []
    event.listen(store.writer.sync_engine, "before_cursor_execute",
                 lambda _c, _cursor, statement, *_rest: statements.append(statement))
    await run_handler(store, ScheduleJobs(), NOW + 1)
    waits_read = [s for s in statements if "history" in s and ("handler" in s or "repeats" in s)]
    assert len(waits_read) == 1 and waits_read[0].lstrip().startswith("UPDATE history")  # both jobs' records
    await run_handler(store, ScheduleJobs(), NOW + 2)
    for job_id in (first, second):
        waits = [h for h in await job_history(store, job_id) if h.result == "SKIPPED"]
        assert [(w.repeats, w.last_at) for w in waits] == [(3, NOW + 2)]


async def test_a_reason_many_jobs_share_is_counted_by_one_statement_the_others_by_one_of_a_row_each(store):
    """A queue that finds no room waits for one reason or a few: its jobs' records are found by one statement per
    handler and reason. A pipeline's reasons name the job each waits for, and a fan-out's name it for a few jobs:
    those stay rows of one statement, so a graph of jobs costs no statement a reason."""
    await add_worker(store, cpu=1)
    alike = [await submit(store, resources={"cpu": 2}) for _ in range(ALIKE_FROM)]  # the only worker is too small
    first = await submit(store, resources={"cpu": 1}, after=[alike[0]])  # one job a reason: waiting for another
    second = await submit(store, resources={"cpu": 1}, after=[first])
    fanned = [await submit(store, resources={"cpu": 1}, after=[alike[1]]) for _ in range(ALIKE_FROM - 1)]
    await run_handler(store, ScheduleJobs(), NOW)
    counted: list[tuple[bool, object]] = []
    event.listen(store.writer.sync_engine, "before_cursor_execute",
                 lambda _c, _cursor, statement, parameters, _context, many:
                 counted.append((many, parameters)) if statement.lstrip().startswith("UPDATE history") else None)
    await run_handler(store, ScheduleJobs(), NOW + 1)
    assert sorted(many for many, _ in counted) == [False, True]  # the shared reason's run, the others' rows
    assert [len(parameters) for many, parameters in counted if many] == [2 + len(fanned)]
    for job_id in (*alike, first, second, *fanned):
        waits = [h for h in await job_history(store, job_id) if h.result == "SKIPPED"]
        assert [(w.repeats, w.last_at) for w in waits] == [(2, NOW + 1)]


async def test_alike_waits_of_more_jobs_than_a_statement_takes_are_each_counted(store, monkeypatch):
    """A reason shared by more jobs than WAITS_CHUNK ids is counted by a statement a chunk, every job's wait on it."""
    monkeypatch.setattr(changes, "WAITS_CHUNK", 5)
    await add_worker(store, cpu=1)
    alike = [await submit(store, resources={"cpu": 2}) for _ in range(ALIKE_FROM)]  # the only worker is too small
    await run_handler(store, ScheduleJobs(), NOW)
    counts: list[str] = []
    event.listen(store.writer.sync_engine, "before_cursor_execute",
                 lambda _c, _cursor, statement, *_rest:
                 counts.append(statement) if statement.lstrip().startswith("UPDATE history") else None)
    await run_handler(store, ScheduleJobs(), NOW + 1)
    assert len(counts) == 3  # of 5, 5 and 2 job ids
    for job_id in alike:
        waits = [h for h in await job_history(store, job_id) if h.result == "SKIPPED"]
        assert [(w.repeats, w.last_at) for w in waits] == [(2, NOW + 1)]
