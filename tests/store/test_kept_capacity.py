"""The capacity index the engine keeps across passes, brought up to date from the history, equals the one rebuilt
from the store after any sequence of real changes (placements, ends, stops, workers joining, lost, coming back
with other capacity, finding Pythons), and the engine sees room freed or added without rebuilding it."""

from __future__ import annotations

import asyncio
import random

import pytest
from sqlalchemy import event

from corral.core.states import TaskState
from corral.engine.cancel import cancel_job
from corral.engine.coordinator import run_handler
from corral.engine.handlers import JOB_HANDLERS, ScheduleJobs
from corral.engine.reports import ingest_heartbeat
from corral.scheduling.capacity import CapacityIndex
from corral.store import scheduling_reads
from corral.store.changes import ChangeSet, StaleWrite, TaskRow
from corral.store.off_loop import ON_LOOP
from corral.store.scheduling_reads import KeptCapacity, capacity_fence, read_cluster
from corral.store.worker_state import mark_seen
from tests.store.helpers import NOW, add_worker, job_tasks, reap, report, settle, submit

SCHEDULE = next(handler for handler in JOB_HANDLERS if handler.name == "ScheduleJobs")


def facts(index: CapacityIndex) -> tuple:
    """What placement reads of an index, with amounts at zero left out (missing reads as zero)."""
    def nonzero(use):
        return {key: {r: a for r, a in amounts.items() if a} for key, amounts in use.items()}
    return (index.rooms, index.position, dict(sorted(index.running.items())), nonzero(index.quota_use),
            {pool: nonzero(use) for pool, use in index.pool_use.items()}, index.lowest_priorities(),
            index.last_placed(), {room.pool: dict(index.capacity(room.pool)) for room in index.rooms},
            dict(index.tasks_of_job))


async def rebuilt(store) -> CapacityIndex:
    async with store.read() as connection:
        return (await read_cluster(connection)).capacity()


async def kept_now(store, kept: KeptCapacity) -> CapacityIndex:
    async with store.read() as connection:
        return await kept.refresh(connection)


async def lose(store, worker_id: str, alive: list[str], moment: float) -> None:
    """The reaper declares `worker_id` lost: every other alive worker was heard from at `moment`."""
    async with store.write() as connection:
        for other in alive:
            if other != worker_id:
                await mark_seen(connection, other, moment)
    await reap(store, moment, loss_timeout=30.0)


async def tasks_in(store, job_ids, states) -> list:
    return [t for job_id in job_ids for t in await job_tasks(store, job_id) if t.state in states]


@pytest.mark.parametrize("seed", range(4))
async def test_the_kept_index_equals_the_one_rebuilt_after_any_real_changes(store, seed):
    rng, kept = random.Random(seed), KeptCapacity()
    alive, names, job_ids, moment = [], 0, [], NOW
    assert facts(await kept_now(store, kept)) == facts(await rebuilt(store))
    for _ in range(30):
        moment += 100
        step = rng.choice(["join", "join", "submit", "submit", "submit", "run", "end", "cancel", "lose", "pythons"])
        if step == "join" or not alive:
            names += 1
            alive.append(await add_worker(store, f"w{rng.randrange(names)}", cpu=rng.choice([2.0, 4.0]),
                                          gpu=rng.choice([0, 2]), pool=rng.choice(["default", "big"]),
                                          labels={"zone": rng.choice("xy")}, now=moment))
        elif step == "submit":
            job_ids.append(await submit(store, replicas=rng.randint(1, 3), priority=rng.choice([0, 5]),
                                        pool=rng.choice(["default", "big"]), project=rng.choice(["p", "q"]),
                                        resources={"cpu": rng.choice([1, 2]), "gpu": rng.choice([0, 1])}))
        elif step in ("run", "end"):
            placed = await tasks_in(store, job_ids, {"ASSIGNED"})
            if placed:
                task = rng.choice(placed)
                events = [(task.id, task.attempt, "BUILDING"), (task.id, task.attempt, "PREPARED"),
                          (task.id, task.attempt, "RUNNING")]
                if step == "end":
                    events.append((task.id, task.attempt, rng.choice(["SUCCEEDED", "FAILED"]), 1))
                await report(store, task.worker_id, *events, now=moment)
        elif step == "cancel" and job_ids:  # its placed tasks stop, holding their room until they end
            cancelled = job_ids.pop(rng.randrange(len(job_ids)))
            async with store.write() as connection:
                await cancel_job(connection, cancelled, moment)
        elif step == "lose":
            victim = rng.choice(alive)
            await lose(store, victim, alive, moment + 1000)
            moment += 1000
            alive.remove(victim)
        elif step == "pythons":
            async with store.write() as connection:
                await ingest_heartbeat(connection, rng.choice(alive), [], moment, pythons=[f"3.{rng.randint(10, 13)}"])
        await settle(store, now=moment)
        assert facts(await kept_now(store, kept)) == facts(await rebuilt(store)), step


async def test_a_task_ending_frees_its_room_for_the_next_pass_without_a_rebuild(store):
    worker = await add_worker(store, cpu=1.0)
    first, second = await submit(store, resources={"cpu": 1}), await submit(store, resources={"cpu": 1})
    before = SCHEDULE.kept.rebuilds
    await settle(store)
    ((task,), (waiting,)) = await job_tasks(store, first), await job_tasks(store, second)
    assert (task.state, waiting.state) == ("ASSIGNED", "PENDING")
    await report(store, worker, (task.id, task.attempt, "BUILDING"), (task.id, task.attempt, "PREPARED"),
                 (task.id, task.attempt, "RUNNING"), (task.id, task.attempt, "SUCCEEDED", 0))
    await settle(store)
    ((placed,),) = [await job_tasks(store, second)]
    assert (placed.state, placed.worker_id) == ("ASSIGNED", worker)
    assert SCHEDULE.kept.rebuilds == before + 1  # built on this store's first pass only


async def test_a_worker_coming_back_with_other_capacity_is_seen(store):
    small = await add_worker(store, "box", cpu=1.0)
    big_job = await submit(store, resources={"cpu": 4})
    before = SCHEDULE.kept.rebuilds
    await settle(store)
    assert (await job_tasks(store, big_job))[0].state == "PENDING"
    await lose(store, small, [small], NOW + 1000)
    bigger = await add_worker(store, "box", cpu=8.0, now=NOW + 2000)
    await settle(store, now=NOW + 2000)
    ((task,),) = [await job_tasks(store, big_job)]
    assert (task.state, task.worker_id) == ("ASSIGNED", bigger)
    assert SCHEDULE.kept.rebuilds == before + 1
    assert facts(await kept_now(store, SCHEDULE.kept)) == facts(await rebuilt(store))


async def test_the_capacity_fence_takes_the_placement_facts_it_is_kept_and_reads_the_others(store):
    """A placing run's fence works out the worker's room from its task rows as they are now, with the placement
    facts (custom slots) of the jobs holding it: those the run's cluster read kept are not read again."""
    worker = await add_worker(store, cpu=8.0, custom={"licence": 2})
    held = await submit(store, resources={"custom": {"licence": 1}})
    handler = ScheduleJobs()
    await run_handler(store, handler, NOW)  # placed: its kept index holds the job's facts
    late = await submit(store, resources={"custom": {"licence": 2}})
    async with store.read() as connection:
        await handler.kept.facts(connection, [late], {})  # as the next run's cluster read does for its targets
    statements: list[str] = []
    listen = lambda *args: statements.append(args[2])  # noqa: E731
    event.listen(store.writer.sync_engine, "before_cursor_execute", listen)
    try:
        for kept in (handler.kept, None):
            statements.clear()
            with pytest.raises(StaleWrite, match="over-booked"):
                async with store.write() as connection:
                    changes = ChangeSet(NOW)
                    row = TaskRow((await job_tasks(store, late))[0].id, late, 0, TaskState.PENDING, 0, None)
                    row.worker_id = worker
                    changes.task_columns(row, worker_id=worker, gpu_ids=[])
                    changes.task(row, TaskState.ASSIGNED, handler="ScheduleJobs")
                    changes.new_attempt(row, worker)
                    async with capacity_fence(connection, changes.placed_workers, kept):
                        await changes.flush(connection)
            read_jobs = [s for s in statements if s.lstrip().startswith("SELECT") and "FROM jobs" in s]
            assert len(read_jobs) == (0 if kept else 1), read_jobs  # the licence it holds is counted either way
    finally:
        event.remove(store.writer.sync_engine, "before_cursor_execute", listen)
    assert [t.state for t in await job_tasks(store, held)] == ["ASSIGNED"]


async def test_many_tasks_moved_at_once_are_taken_in_as_a_rebuild_reads_them(store):
    """More changed tasks than are moved on the event loop: the index is updated in a thread, to the same end."""
    worker = await add_worker(store, cpu=64.0)
    kept = KeptCapacity()
    await kept_now(store, kept)
    job = await submit(store, replicas=2 * ON_LOOP, resources={"cpu": 1})
    await settle(store)
    placed = await job_tasks(store, job)
    assert len(placed) > ON_LOOP and {task.state for task in placed} == {"ASSIGNED"}
    assert facts(await kept_now(store, kept)) == facts(await rebuilt(store))
    for task in placed[:ON_LOOP + 1]:
        await report(store, worker, (task.id, task.attempt, "BUILDING"), (task.id, task.attempt, "PREPARED"),
                     (task.id, task.attempt, "RUNNING"), (task.id, task.attempt, "SUCCEEDED", 0))
    assert facts(await kept_now(store, kept)) == facts(await rebuilt(store))
    assert kept.rebuilds == 1


async def test_a_few_hundred_history_rows_are_read_on_the_loop_and_more_past_it(store, monkeypatch):
    """History rows are five plain columns: up to PLAIN_ON_LOOP of them are read and named on the loop, with no hop
    to a thread (which waits for a core on a busy machine, the writer held); past that, in a thread. The index is
    right either way."""
    await add_worker(store, cpu=64.0)
    kept = KeptCapacity()
    await kept_now(store, kept)
    hops = []
    to_thread = asyncio.to_thread
    monkeypatch.setattr(asyncio, "to_thread", lambda call, *args: hops.append(call) or to_thread(call, *args))
    for many in (False, True):
        for _ in range(ON_LOOP // 2):  # each job some 3 history rows by now, more than ON_LOOP; fewer tasks
            await submit(store, resources={"cpu": 1})
        await settle(store)
        if many:
            monkeypatch.setattr(scheduling_reads, "PLAIN_ON_LOOP", 4)
        hops.clear()
        index = await kept_now(store, kept)
        assert (len(hops) >= 2) is many  # the rows past the first PLAIN_ON_LOOP, and naming them
        assert facts(index) == facts(await rebuilt(store))
    assert kept.rebuilds == 1


async def test_an_update_that_fails_midway_leaves_the_index_to_be_built_afresh(store, monkeypatch):
    """The rows read are past: an index left half moved would never be set right, so the next pass rebuilds it."""
    await add_worker(store, cpu=8.0)
    kept = KeptCapacity()
    await kept_now(store, kept)
    await submit(store, replicas=4, resources={"cpu": 1})
    await settle(store)
    with monkeypatch.context() as patched:
        patched.setattr(CapacityIndex, "add", lambda self, task: (_ for _ in ()).throw(RuntimeError("midway")))
        with pytest.raises(RuntimeError, match="midway"):
            await kept_now(store, kept)
    assert facts(await kept_now(store, kept)) == facts(await rebuilt(store))
    assert kept.rebuilds == 2


async def test_on_sqlite_the_capacity_fence_reads_its_workers_with_the_tasks_holding_room_in_one_statement(store):
    """SQLite has one writer: nothing to lock before the flush, so the workers and what they hold are one read after
    it, judged as before (here over-booked). PostgreSQL locks the workers first, then reads what they hold: two."""
    worker = await add_worker(store, cpu=1.0)
    await submit(store)
    await run_handler(store, ScheduleJobs(), NOW)  # placed on `worker`, the only one: it is full
    idle = await add_worker(store, "w1", cpu=1.0)
    late, other = await submit(store), await submit(store)
    statements: list[str] = []
    listen = lambda *args: statements.append(args[2])  # noqa: E731
    event.listen(store.writer.sync_engine, "before_cursor_execute", listen)
    try:
        with pytest.raises(StaleWrite, match="over-booked"):
            async with store.write() as connection:
                changes = ChangeSet(NOW)
                for job_id, on in ((late, worker), (other, idle)):  # a second worker that holds nothing
                    task = (await job_tasks(store, job_id))[0]
                    row = TaskRow(task.id, job_id, 0, TaskState.PENDING, 0, None)
                    row.worker_id = on
                    changes.task_columns(row, worker_id=on, gpu_ids=[])
                    changes.task(row, TaskState.ASSIGNED, handler="ScheduleJobs")
                    changes.new_attempt(row, on)
                statements.clear()
                async with capacity_fence(connection, changes.placed_workers):
                    await changes.flush(connection)
    finally:
        event.remove(store.writer.sync_engine, "before_cursor_execute", listen)
    fence = [s for s in statements if s.lstrip().startswith("SELECT") and ("FROM workers" in s or "tasks.gpu_ids" in s)]
    assert len(fence) == (1 if store.is_sqlite else 2), [s[:70] for s in fence]
