"""The reads the API and the dashboard make through the store, on both backends: counts, sums, joins and pages."""

from __future__ import annotations

from corral.store.deployments import (
    deployment_rows,
    destroy_deployment,
    insert_deployment,
    name_exists,
    newest_named,
    replica_counts,
    replica_tasks_holding,
    replicas_with_workers,
    serving_history,
)
from corral.store.job_views import JobFilter, count_jobs, history_rows, jobs_with_task_counts, page_ids, queue_page
from corral.store.orders import gang_masters, ordered_tasks
from corral.store.overview import jobs_by_state, tasks_by_state, waiting_jobs
from corral.store.workers import held_by_worker, worker_rows
from tests.store.helpers import NOW, add_worker, job_tasks, settle, submit
from tests.store.test_serving_store import SPEC, serve_pass


async def cluster(store) -> tuple[str, int, int]:
    """A worker with 4 CPUs holding a gang of two 1-CPU tasks, and a job too large for it waiting."""
    worker = await add_worker(store, cpu=4.0)
    gang = await submit(store, name="gang", replicas=2, gang=True, resources={"cpu": 1})
    waiting = await submit(store, name="big_one", resources={"cpu": 8})
    await settle(store)
    return worker, gang, waiting


async def test_what_tasks_hold_is_summed_per_worker_and_counted_by_state(store):
    worker, gang, waiting = await cluster(store)
    async with store.read() as connection:
        held = await held_by_worker(connection)
        rows, counts = await jobs_with_task_counts(connection, [gang, waiting, 999])
        assert [w.id for w in await worker_rows(connection)] == [worker]
        assert await jobs_by_state(connection) == {"PREPARING": 1, "PENDING": 1}
        assert await tasks_by_state(connection) == {"ASSIGNED": 2, "PENDING": 1}
    assert list(held) == [worker]  # the waiting task, on no worker, is no one's
    assert (held[worker].cpu, held[worker].n) == (2.0, 2)
    assert counts == {gang: {"ASSIGNED": 2}, waiting: {"PENDING": 1}}
    assert {i: (r.name, r.replicas) for i, r in rows.items()} == {gang: ("gang", 2), waiting: ("big_one", 1)}


async def test_the_queue_holds_only_jobs_with_waiting_tasks_and_pages_in_id_order(store):
    _, _, waiting = await cluster(store)
    later = await submit(store, name="bigger", replicas=2, resources={"cpu": 16})
    await settle(store)
    async with store.read() as connection:
        rows, total = await queue_page(connection, limit=1, offset=1)
        overview = await waiting_jobs(connection)
    assert ([(r.id, r.waiting) for r in rows], total) == ([(later, 2)], 2)
    assert sorted((r.id, r.n) for r in overview) == [(waiting, 1), (later, 2)]


async def test_a_page_of_jobs_escapes_the_name_and_tells_whether_more_follow(store):
    _, gang, waiting = await cluster(store)
    other = await submit(store, name="bigXone")
    async with store.read() as connection:
        by_name = await page_ids(connection, JobFilter(name="g_o"), "id", True, limit=10, offset=0, cursor=None)
        newest = await page_ids(connection, JobFilter(), "id", True, limit=1, offset=0, cursor=None)
        assert await count_jobs(connection, JobFilter(states=["PENDING"])) == 2
    assert by_name == [waiting]  # `_` is a letter to match, not any one character: "bigXone" stays out
    assert newest == [other, waiting]  # one more than the limit: another page follows
    assert gang not in by_name


async def test_orders_read_the_workers_tasks_and_the_gangs_master(store):
    worker, gang, _ = await cluster(store)
    async with store.read() as connection:
        rows = await ordered_tasks(connection, [worker])
        masters = await gang_masters(connection, {gang})
        assert await gang_masters(connection, set()) == {}
    assert [(r.job_id, r.index, r.state, r.gang) for r in rows] == [(gang, 0, "ASSIGNED", True),
                                                                    (gang, 1, "ASSIGNED", True)]
    assert masters == {gang: "127.0.0.1"}


async def test_a_jobs_history_names_the_task_of_each_record(store):
    _, gang, _ = await cluster(store)
    tasks = {t.id: t.index for t in await job_tasks(store, gang)}
    async with store.read() as connection:
        rows = await history_rows(connection, gang)
    assert rows[0].task_id is None and rows[0].task_index is None  # the submission: the job's own
    assert all(r.task_index == tasks[r.task_id] for r in rows if r.task_id is not None)


async def test_deployment_reads_count_replicas_join_their_workers_and_keep_the_destroyed_apart(store):
    worker = await add_worker(store)
    async with store.write() as connection:
        gone = await insert_deployment(connection, SPEC.model_copy(update={"name": "old"}), [], NOW)
        await destroy_deployment(connection, "old", NOW)
        live = await insert_deployment(connection, SPEC, [], NOW)
    await serve_pass(store, NOW)
    await serve_pass(store, NOW + 1)
    async with store.read() as connection:
        shown = [r.id for r in await deployment_rows(connection)]
        every = [r.id for r in await deployment_rows(connection, shown_only=False, limit=1)]
        counts = await replica_counts(connection, [live, gone])
        joined = await replicas_with_workers(connection, [live])
        holding = await replica_tasks_holding(connection)
        history = await serving_history(connection, live, limit=2)
        assert await name_exists(connection, "old") and not await name_exists(connection, "new")
        assert (await newest_named(connection, "old")).id == gone
    assert (shown, every) == ([live], [live])
    assert counts == {live: {"PROVISIONING": 1}}
    assert [(r.deployment_id, r.worker_id, r.worker_name) for r in joined] == [(live, worker, "w0")]
    assert [h.name for h in holding] == ["svc"]
    assert len(history) == 2 and history[0].id < history[1].id  # the latest two, oldest first

