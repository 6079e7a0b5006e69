"""The launch tree over a real store: the cancel cascade through the engine, and the tree queries."""

from __future__ import annotations

from corral.core.spec import JobSpec
from corral.engine.cancel import cancel_job
from corral.store.jobs import insert_job
from corral.store.launches import launched_within, subtree_ids
from tests.store.helpers import NOW, add_worker, job, job_history, job_tasks, report, run_task, settle


async def launch(store, launcher: int | None, **spec) -> int:
    spec.setdefault("command", ["true"])
    async with store.write() as connection:
        return await insert_job(connection, JobSpec(**spec), None, NOW, launched_by=launcher)


async def test_cancelling_a_launcher_cancels_its_tree_with_the_cause_in_history(store):
    worker = await add_worker(store, cpu=8)
    root = await launch(store, None, name="driver")
    child = await launch(store, root, name="trial")
    grandchild = await launch(store, child, name="step")
    unrelated = await launch(store, None)
    waiting = await launch(store, child, resources={"cpu": 64})  # never placed: killed without a stop
    await settle(store)
    async with store.write() as connection:
        await cancel_job(connection, root, NOW)
    await settle(store)
    for job_id in (child, grandchild):
        assert (await job(store, job_id)).state == "TERMINATING"
        assert (await job(store, job_id)).cancelled
        (task,) = await job_tasks(store, job_id)
        assert task.state == "TERMINATING"  # its stop was ordered in the same pass
    assert (await job(store, waiting)).state == "CANCELLED"
    assert (await job(store, unrelated)).state != "TERMINATING"
    cascade = [h for h in await job_history(store, grandchild) if h.handler == "CancelLaunched"]
    assert [(h.to_state, h.message) for h in cascade] == [
        ("TERMINATING", f"cancelled: the job that launched it (job {child}) was cancelled")]
    for job_id in (root, child, grandchild):
        for task in await job_tasks(store, job_id):
            await report(store, worker, (task.id, task.attempt, "KILLED"))
    await settle(store)
    assert [(await job(store, j)).state for j in (root, child, grandchild)] == ["CANCELLED"] * 3


async def test_a_launcher_that_succeeds_leaves_its_children_running_and_a_failed_child_does_not_fail_it(store):
    worker = await add_worker(store, cpu=8)
    root = await launch(store, None)
    ok_child = await launch(store, root)
    failing_child = await launch(store, root)
    await settle(store)
    (task,) = await job_tasks(store, failing_child)
    await run_task(store, worker, task, exit_code=3)
    assert (await job(store, failing_child)).state == "FAILED"
    (task,) = await job_tasks(store, root)
    await run_task(store, worker, task)
    assert (await job(store, root)).state == "SUCCEEDED"
    assert (await job(store, ok_child)).state not in ("TERMINATING", "CANCELLED")


async def test_a_failed_launcher_cancels_its_children(store):
    worker = await add_worker(store, cpu=8)
    root = await launch(store, None)
    child = await launch(store, root)
    await settle(store)
    (task,) = await job_tasks(store, root)
    await run_task(store, worker, task, exit_code=1)
    assert (await job(store, root)).state == "FAILED"
    row = await job(store, child)
    assert (row.state, row.cancelled) == ("TERMINATING", True)
    assert [h.message for h in await job_history(store, child) if h.handler == "CancelLaunched"] == [
        f"cancelled: the job that launched it (job {root}) ended FAILED"]


async def test_tree_queries(store):
    root = await launch(store, None)
    child = await launch(store, root)
    grandchild = await launch(store, child)
    other = await launch(store, None)
    async with store.read() as connection:
        assert sorted((await connection.execute(subtree_ids(root))).scalars()) == [root, child, grandchild]
        assert await launched_within(connection, grandchild, root) is True
        assert await launched_within(connection, root, child) is False
        assert await launched_within(connection, other, root) is False
        assert await launched_within(connection, 999, root) is None
