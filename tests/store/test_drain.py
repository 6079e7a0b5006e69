"""The gang drain over a real store: trigger at the edges, acknowledgements, force, completion, budgets."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from corral.controller.orders import orders_of
from corral.core.states import Fact, JobState, TaskState
from corral.engine.drain import drain_gang
from corral.engine.preemption import JobRef, NotCurrent, preempt_tasks, record_checkpoint
from corral.engine.reports import Refused
from corral.store.changes import ChangeSet
from corral.store.reads import task_row
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
    settle,
    submit,
    task_attempts,
)


async def running_gang(store, replicas=3, workers=None, **spec):
    """A gang placed and RUNNING; returns (job id, worker ids, task rows)."""
    workers = workers or [await add_worker(store, name=f"w{i}", cpu=1) for i in range(replicas)]
    job_id = await submit(store, replicas=replicas, gang=True, **spec)
    await run_gang(store, job_id)
    return job_id, workers, await job_tasks(store, job_id)


async def run_gang(store, job_id, now=NOW):
    """Place the gang and walk every member to RUNNING, as its workers report it."""
    await settle(store, now=now)
    for task in await job_tasks(store, job_id):
        await report(store, task.worker_id, (task.id, task.attempt, "BUILDING"), (task.id, task.attempt, "PREPARED"),
                     now=now)
    await settle(store, now=now)
    for task in await job_tasks(store, job_id):
        await report(store, task.worker_id, (task.id, task.attempt, "RUNNING"), now=now)
    await settle(store, now=now)
    assert (await job(store, job_id)).state == "RUNNING"


async def states(store, job_id):
    return [t.state for t in await job_tasks(store, job_id)]


async def test_a_failed_member_starts_one_drain_and_its_siblings_are_told_with_the_epoch(store):
    job_id, workers, (t0, t1, t2) = await running_gang(store, max_retries_failure=1, grace_period=3)
    await report(store, t2.worker_id, (t2.id, 0, "FAILED", 1))
    row = await job(store, job_id)
    assert (row.state, row.preemption_epoch, row.drain_trigger) == ("DRAINING", 1, 2)
    assert await states(store, job_id) == ["PREEMPTING", "PREEMPTING", "PENDING"]
    assert [t.preempt_epoch for t in await job_tasks(store, job_id)][:2] == [1, 1]
    async with store.read() as connection:
        (order,) = (await orders_of(connection, [t0.worker_id]))[t0.worker_id]
    assert (order.action, order.task_id, order.attempt, order.epoch, order.grace_period) == (
        "preempt", t0.id, 0, 1, 3.0)
    started = [h for h in await job_history(store, job_id) if h.handler == "DrainGang" and h.task_id is None]
    assert len(started) == 1 and "epoch 1" in started[0].message and "task 2 FAILED" in started[0].message
    # The second failure of a drain is not a second drain: it crossed the order and is the preemption itself.
    await report(store, t1.worker_id, (t1.id, 0, "FAILED", 134))
    assert (await job(store, job_id)).preemption_epoch == 1
    assert (await job_tasks(store, job_id))[1].state == "PREEMPTED"
    assert (await task_attempts(store, t1.id))[0].refunded


async def test_a_heartbeat_that_starts_a_drain_and_settles_its_job_writes_once(store, monkeypatch):
    """The member's end, the drain it starts and the job it settles are one flush of one ChangeSet."""
    job_id, _, (_, _, t2) = await running_gang(store, max_retries_failure=1)
    flushes = []
    real = ChangeSet.flush

    async def counted(self, connection):
        flushes.append(self)
        await real(self, connection)

    monkeypatch.setattr(ChangeSet, "flush", counted)
    await report(store, t2.worker_id, (t2.id, 0, "FAILED", 1))
    assert len(flushes) == 1
    assert (await job(store, job_id)).state == "DRAINING"


async def test_a_gang_member_that_starts_itself_before_start_jobs_is_refused_and_nothing_applied(store):
    worker = await add_worker(store, cpu=2)
    job_id = await submit(store, replicas=2, gang=True)
    await settle(store)
    first, second = await job_tasks(store, job_id)
    await report(store, worker, (first.id, 0, "BUILDING"), (first.id, 0, "PREPARED"))  # no pass since: no StartJobs
    with pytest.raises(Refused, match="StartJobs"):
        await report(store, worker, (second.id, 0, "BUILDING"), (first.id, 0, "RUNNING"))
    assert await states(store, job_id) == ["PREPARED", "ASSIGNED"]


async def test_members_failing_in_one_report_make_one_drain(store):
    worker = await add_worker(store, cpu=4)
    job_id, _, (t0, t1, t2) = await running_gang(store, workers=[worker], max_retries_failure=1)
    await report(store, worker, (t0.id, 0, "FAILED", 1), (t1.id, 0, "FAILED", 1))
    row = await job(store, job_id)
    assert (row.state, row.preemption_epoch, row.drain_trigger) == ("DRAINING", 1, 0)
    assert await states(store, job_id) == ["PENDING", "PENDING", "PREEMPTING"]
    assert [t.failures for t in await job_tasks(store, job_id)] == [1, 1, 0]


async def test_acknowledged_drain_puts_the_gang_back_as_a_unit_with_refunds(store):
    job_id, workers, (t0, t1, t2) = await running_gang(store, max_retries_failure=1)
    await report(store, t2.worker_id, (t2.id, 0, "FAILED", 1))
    with pytest.raises(NotCurrent, match="epoch 2 is not current"):
        await acknowledge(store, t0.worker_id, t0, epoch=2)
    with pytest.raises(NotCurrent, match="not on worker"):
        await acknowledge(store, "someone-else", t0)
    assert await states(store, job_id) == ["PREEMPTING", "PREEMPTING", "PENDING"]  # the refusals changed nothing
    await acknowledge(store, t0.worker_id, t0, exit_code=143)
    await settle(store)
    assert (await job(store, job_id)).state == "DRAINING"  # task 1 has not acknowledged yet
    await acknowledge(store, t1.worker_id, t1)
    await settle(store)
    assert (await job(store, job_id)).state == "PREPARING"  # drained, back to PENDING and placed again
    after = await job_tasks(store, job_id)
    assert [(t.state, t.attempt, t.failures, t.preemptions) for t in after] == [
        ("ASSIGNED", 1, 0, 0), ("ASSIGNED", 1, 0, 0), ("ASSIGNED", 1, 1, 0)]
    first = [(await task_attempts(store, t.id))[0] for t in after]
    assert [(a.state, a.refunded) for a in first] == [("PREEMPTED", True), ("PREEMPTED", True), ("FAILED", False)]
    assert first[0].exit_code == 143
    steps = [(h.handler, h.result, h.from_state, h.to_state) for h in await job_history(store, job_id)
             if h.task_id is None]
    assert ("CompleteDrain", "SUCCESS", "DRAINING", "PENDING") in steps
    with pytest.raises(NotCurrent):  # an acknowledgement of a drain that is over
        await acknowledge(store, t0.worker_id, t0, attempt=0, epoch=1)


async def test_an_unacknowledged_task_is_forced_after_the_drain_timeout_and_completes_the_drain(store):
    job_id, workers, (t0, t1, t2) = await running_gang(store, max_retries_failure=1, grace_period=5)
    await report(store, t2.worker_id, (t2.id, 0, "FAILED", 1))
    await acknowledge(store, t1.worker_id, t1)
    await settle(store, now=NOW + 34)
    assert (await job(store, job_id)).state == "DRAINING"  # within grace + 30 s
    await settle(store, now=NOW + 36)
    assert (await job(store, job_id)).state == "PREPARING"  # forced and completed in one pass, then placed
    history = await job_history(store, job_id)
    forced = [h for h in history if h.handler == "ForceDrain"]
    assert [(h.result, h.from_state, h.to_state) for h in forced] == [("EXPIRED", "PREEMPTING", "PREEMPTED")]
    assert "drain timeout (35s)" in forced[0].message
    assert (await task_attempts(store, t0.id))[0].refunded


async def test_a_gang_whose_member_already_succeeded_fails_and_keeps_the_success_on_record(store):
    job_id, workers, (t0, t1, t2) = await running_gang(store, max_retries_failure=3)
    await report(store, t0.worker_id, (t0.id, 0, "SUCCEEDED", 0))
    await settle(store)
    assert (await job(store, job_id)).state == "RUNNING"
    await report(store, t1.worker_id, (t1.id, 0, "FAILED", 1))
    assert await states(store, job_id) == ["SUCCEEDED", "PENDING", "PREEMPTING"]
    await acknowledge(store, t2.worker_id, t2)
    await settle(store)
    row = await job(store, job_id)
    assert row.state == "FAILED"
    assert await states(store, job_id) == ["SUCCEEDED", "KILLED", "PREEMPTED"]
    (verdict,) = [h for h in await job_history(store, job_id) if h.handler == "CompleteDrain" and not h.task_id]
    assert verdict.result == "GIVE_UP" and "task 0 already ended SUCCEEDED" in verdict.message


async def test_a_lost_worker_starts_the_drain(store):
    job_id, workers, (t0, t1) = await running_gang(store, replicas=2)
    await report(store, t0.worker_id, now=NOW + 20)  # w0 keeps heartbeating; w1 falls silent
    await reap(store, now=NOW + 40)
    row = await job(store, job_id)
    assert (row.state, row.drain_trigger) == ("DRAINING", 1)
    assert await states(store, job_id) == ["PREEMPTING", "PENDING"]
    assert [t.preemptions for t in await job_tasks(store, job_id)] == [0, 1]
    # The survivor's worker dies too, mid-drain: no second drain, no charge, and the drain completes.
    await reap(store, now=NOW + 60)
    await settle(store, now=NOW + 60)
    row = await job(store, job_id)
    assert (row.state, row.preemption_epoch) == ("PENDING", 1)  # no worker left to place it on
    assert [t.preemptions for t in await job_tasks(store, job_id)] == [0, 1]


async def test_three_real_failures_end_the_gang(store):
    """Task 0 fails every time, its siblings are refunded each round; corral's max_retries_failure=2 allows
    three real failures. The gang ends FAILED, it never loops."""
    job_id, workers, tasks_ = await running_gang(store, max_retries_failure=2)
    for attempt in range(3):
        t0, t1, t2 = await job_tasks(store, job_id)
        await report(store, t0.worker_id, (t0.id, attempt, "FAILED", 1))
        for sibling in (t1, t2):
            await acknowledge(store, sibling.worker_id, sibling)
        await settle(store)
        if attempt < 2:
            await run_gang(store, job_id)
    assert (await job(store, job_id)).state == "FAILED"
    t0, t1, t2 = await job_tasks(store, job_id)
    assert [(t.state, t.failures) for t in (t0, t1, t2)] == [("FAILED", 3), ("PREEMPTED", 0), ("PREEMPTED", 0)]
    assert [a.refunded for a in await task_attempts(store, t1.id)] == [True, True, True]
    assert (await job(store, job_id)).preemption_epoch == 3


async def test_a_checkpoint_saved_while_preempting_is_offered_to_the_next_attempt(store):
    job_id, workers, (t0, t1) = await running_gang(store, replicas=2, max_retries_failure=1)
    await report(store, t1.worker_id, (t1.id, 0, "FAILED", 1))
    async with store.write() as connection:
        with pytest.raises(NotCurrent):
            await record_checkpoint(connection, t0.worker_id, t0.id, attempt=0, epoch=5, size=3, now=NOW)
    async with store.write() as connection:
        await record_checkpoint(connection, t0.worker_id, t0.id, attempt=0, epoch=1, size=3, now=NOW)
    await acknowledge(store, t0.worker_id, t0)
    await settle(store)
    t0 = (await job_tasks(store, job_id))[0]
    assert (t0.checkpoint_epoch, t0.checkpoint_size, t0.state) == (1, 3, "ASSIGNED")
    async with store.read() as connection:
        orders = (await orders_of(connection, [t0.worker_id]))[t0.worker_id]
    assert [(o.action, o.task_id, o.checkpoint) for o in orders] == [("build", t0.id, True)]


@pytest.mark.parametrize(("budget", "end"), [(1, "ASSIGNED"), (0, "PREEMPTED")])
async def test_preempting_an_independent_task_retries_it_within_its_preemption_budget(store, budget, end):
    worker = await add_worker(store)
    job_id = await submit(store, max_retries_preemption=budget)
    await settle(store)
    (task,) = await job_tasks(store, job_id)
    await report(store, worker, (task.id, 0, "BUILDING"), (task.id, 0, "PREPARED"))
    await settle(store)
    await report(store, worker, (task.id, 0, "RUNNING"))
    async with store.write() as connection:
        row = (await connection.execute(select(tasks).where(tasks.c.id == task.id))).one()
        changes = ChangeSet(NOW)
        epoch = preempt_tasks(changes, JobRef(job_id, JobState.RUNNING, 0), [task_row(row)], handler=Fact.PREEMPT,
                              reason="room for a higher priority")
        await changes.flush(connection)
    assert epoch == 1 and (await job_tasks(store, job_id))[0].state == TaskState.PREEMPTING
    await acknowledge(store, worker, task)
    await settle(store)
    (task,) = await job_tasks(store, job_id)
    assert (task.state, task.preemptions) == (end, 1)
    assert (await job(store, job_id)).state == ("RUNNING" if budget else "LOST")


async def test_a_whole_gang_drained_to_make_room_comes_back_with_every_attempt_refunded(store):
    job_id, workers, members = await running_gang(store, replicas=2)
    async with store.write() as connection:
        rows = (await connection.execute(select(tasks).where(tasks.c.job_id == job_id).order_by(tasks.c.index))).all()
        changes = ChangeSet(NOW)
        epoch = drain_gang(changes, JobRef(job_id, JobState.RUNNING, 0), [task_row(r) for r in rows],
                           cause="room for a higher priority")
        await changes.flush(connection)
    assert epoch == 1 and await states(store, job_id) == ["PREEMPTING", "PREEMPTING"]
    assert ((await job(store, job_id)).state, (await job(store, job_id)).drain_trigger) == ("DRAINING", None)
    for member in members:
        await acknowledge(store, member.worker_id, member)
    await settle(store)
    after = await job_tasks(store, job_id)
    assert [(t.state, t.attempt, t.preemptions) for t in after] == [("ASSIGNED", 1, 0), ("ASSIGNED", 1, 0)]
    assert [(await task_attempts(store, t.id))[0].refunded for t in after] == [True, True]
