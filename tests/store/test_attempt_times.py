"""An attempt ends when it was last known to run, so its RAN time leaves out time the cluster was down."""

from __future__ import annotations

from corral.core.protocol import TaskReport
from corral.engine.reports import ingest_heartbeat
from tests.store.helpers import NOW, add_worker, job_tasks, reap, report, settle, submit, task_attempts


async def running_task(store, worker):
    job_id = await submit(store)
    await settle(store)
    (task,) = await job_tasks(store, job_id)
    await report(store, worker, (task.id, 0, "BUILDING"), (task.id, 0, "PREPARED"), now=NOW + 1)
    await settle(store, now=NOW + 1)
    await report(store, worker, (task.id, 0, "RUNNING"), now=NOW + 2)
    return task


async def test_an_exit_reported_after_an_outage_ends_the_attempt_when_the_worker_saw_it(store):
    worker = await add_worker(store)
    task = await running_task(store, worker)
    late = TaskReport(task_id=task.id, attempt=0, state="SUCCEEDED", exit_code=0, at=NOW + 10)
    async with store.write() as connection:  # the controller was down from NOW + 5 to NOW + 500
        await ingest_heartbeat(connection, worker, [late], NOW + 500)
    (attempt,) = await task_attempts(store, task.id)
    assert (attempt.state, attempt.started_at, attempt.finished_at) == ("SUCCEEDED", NOW + 2, NOW + 10)


async def test_a_lost_workers_attempt_ends_at_its_last_heartbeat_not_when_the_loss_is_found(store):
    worker = await add_worker(store)
    task = await running_task(store, worker)
    await report(store, worker, now=NOW + 7)  # a heartbeat with nothing new: still running then
    await reap(store, now=NOW + 300, loss_timeout=30)  # found after an outage
    first = (await task_attempts(store, task.id))[0]
    assert (first.state, first.started_at, first.finished_at) == ("WORKER_FAILED", NOW + 2, NOW + 7)


async def test_a_report_stamped_ahead_of_the_controllers_clock_ends_the_attempt_now(store):
    worker = await add_worker(store)
    task = await running_task(store, worker)
    ahead = TaskReport(task_id=task.id, attempt=0, state="FAILED", exit_code=1, at=NOW + 900)
    async with store.write() as connection:
        await ingest_heartbeat(connection, worker, [ahead], NOW + 20)
    assert (await task_attempts(store, task.id))[0].finished_at == NOW + 20
