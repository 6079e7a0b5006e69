"""Report heartbeats that come together are applied together: one transaction and one set of statements for all
of them, each still answered only once its reports are committed, and one refused (or of a worker unknown) failing
alone; the orders they are answered with are read together too."""

from __future__ import annotations

import asyncio
import threading

import pytest
from sqlalchemy import event, select, update

from corral.controller.grouped_writes import GroupedWrites
from corral.controller.orders import OrderReads
from corral.core.protocol import TaskReport
from corral.core.states import Fact
from corral.engine import reports as reports_module
from corral.engine.reports import Heartbeat, Refused, UnknownWorker, ingest_group, ingest_heartbeats
from corral.store.schema import jobs, workers
from tests.store.helpers import NOW, add_worker, job, job_history, job_tasks, settle, submit

WORKERS = 6


async def placed(store) -> tuple[int, list]:
    """A job of WORKERS one-CPU tasks placed one on each of WORKERS one-CPU workers: its id and its tasks."""
    for i in range(WORKERS):
        await add_worker(store, f"w{i}", cpu=1.0)
    job_id = await submit(store, replicas=WORKERS, resources={"cpu": 1})
    await settle(store)
    tasks = await job_tasks(store, job_id)
    assert len({task.worker_id for task in tasks}) == WORKERS
    return job_id, tasks


def heartbeat(task, *states: str, **facts) -> Heartbeat:
    return Heartbeat(task.worker_id, [TaskReport(task_id=task.id, attempt=task.attempt, state=state,
                                                 exit_code=0 if state == "SUCCEEDED" else None, at=NOW)
                                      for state in states], **facts)


def counted_statements(store) -> list[str]:
    statements: list[str] = []
    event.listen(store.writer.sync_engine, "before_cursor_execute",
                 lambda _c, _cursor, statement, *_rest: statements.append(statement))
    return statements


async def test_a_group_of_heartbeats_costs_the_statements_of_one(store):
    _, tasks = await placed(store)
    statements = counted_statements(store)
    async with store.write() as connection:
        await ingest_heartbeats(connection, [heartbeat(task, "BUILDING") for task in tasks[:2]], NOW)
    pair = len(statements)
    statements.clear()
    async with store.write() as connection:
        await ingest_heartbeats(connection, [heartbeat(task, "BUILDING") for task in tasks[2:]], NOW)
    assert len(statements) == pair  # four heartbeats, as many statements as two


async def test_concurrent_reports_share_commits_and_each_is_applied_on_record(store):
    job_id, tasks = await placed(store)
    commits = []
    store.on_commit.append(lambda: commits.append(1))
    reports = GroupedWrites(store, ingest_group)
    answers = await asyncio.wait_for(asyncio.gather(*(
        reports.write(heartbeat(task, "BUILDING", "PREPARED", "RUNNING", "SUCCEEDED")) for task in tasks)), 30)
    assert len(commits) < WORKERS
    assert all(answer.reporters >= {task.worker_id} for answer, task in zip(answers, tasks, strict=True))
    assert (await job(store, job_id)).state == "SUCCEEDED"
    moves = [(row.task_id, row.to_state) for row in await job_history(store, job_id)
             if row.handler == Fact.WORKER and row.task_id is not None]
    assert sorted(moves) == sorted((task.id, state) for task in tasks
                                   for state in ("BUILDING", "PREPARED", "RUNNING", "SUCCEEDED"))


async def test_a_refused_heartbeat_or_an_unknown_worker_fails_alone(store):
    job_id, tasks = await placed(store)
    reports = GroupedWrites(store, ingest_group)
    refused = heartbeat(tasks[0], "BUILDING", "PENDING")
    unknown = Heartbeat("never-registered", [])
    outcomes = await asyncio.wait_for(asyncio.gather(
        reports.write(refused), reports.write(unknown),
        *(reports.write(heartbeat(task, "BUILDING")) for task in tasks[1:]), return_exceptions=True), 30)
    assert [type(outcome) for outcome in outcomes[:2]] == [Refused, UnknownWorker]
    states = {task.id: task.state for task in await job_tasks(store, job_id)}
    assert states == {task.id: "ASSIGNED" if task is tasks[0] else "BUILDING" for task in tasks}


async def test_facts_sent_in_a_group_reach_their_workers_rows(store):
    _, tasks = await placed(store)
    async with store.write() as connection:
        await ingest_heartbeats(connection, [heartbeat(tasks[0], "BUILDING", pythons=["3.12"]),
                                             heartbeat(tasks[1], "BUILDING")], NOW + 1)
        found = dict((await connection.execute(select(workers.c.id, workers.c.pythons))).all())
        seen = dict((await connection.execute(select(workers.c.id, workers.c.last_heartbeat))).all())
    assert found[tasks[0].worker_id] == ["3.12"] and not found[tasks[1].worker_id]
    assert seen[tasks[0].worker_id] == seen[tasks[1].worker_id] == NOW + 1


async def test_orders_read_together_are_each_worker_s_own(store):
    _, tasks = await placed(store)
    opened = []
    read = store.read

    def counted_read(*args, **kwargs):
        opened.append(1)
        return read(*args, **kwargs)

    store.read = counted_read
    reads = OrderReads(store)
    answers = await asyncio.wait_for(asyncio.gather(*(reads.read(task.worker_id, None) for task in tasks)), 30)
    assert len(opened) < len(tasks)
    assert [[(order.action, order.task_id) for order in answer] for answer in answers] == \
        [[("build", task.id)] for task in tasks]


async def test_reads_of_one_worker_read_together_each_get_the_builds_they_do_not_hold(store):
    """One build is made for all of them unless every one holds it; each answer leaves out what its own holds."""
    worker = await add_worker(store, "w", cpu=3.0)
    job_id = await submit(store, replicas=3, resources={"cpu": 1})
    await settle(store)
    first, second, third = [(task.id, task.attempt) for task in await job_tasks(store, job_id)]
    reads = OrderReads(store)
    answers = await asyncio.wait_for(asyncio.gather(
        reads.read(worker, None), reads.read(worker, None, frozenset({first})),
        reads.read(worker, None, frozenset({first, second}))), 30)
    assert [[order.task_id for order in answer] for answer in answers] == [
        [first[0], second[0], third[0]], [second[0], third[0]], [third[0]]]


async def test_a_worker_whose_orders_cannot_be_read_fails_alone(store):
    _, tasks = await placed(store)
    spare = await add_worker(store, "spare", cpu=1.0)
    broken = await submit(store, resources={"cpu": 1})
    await settle(store)
    async with store.write() as connection:  # a stored spec no order can be made of
        await connection.execute(update(jobs).where(jobs.c.id == broken).values(spec={"resources": {"cpu": 1}}))
    reads = OrderReads(store)
    answers = await asyncio.wait_for(asyncio.gather(*(reads.read(worker, None) for worker in
                                                      [task.worker_id for task in tasks] + [spare]),
                                                    return_exceptions=True), 30)
    assert [[order.task_id for order in answer] for answer in answers[:-1]] == [[task.id] for task in tasks]
    assert isinstance(answers[-1], KeyError)


async def test_a_large_group_s_moves_are_worked_out_off_the_event_loop(store, monkeypatch):
    _, tasks = await placed(store)
    loop_thread, applied_in = threading.get_ident(), []
    apply = reports_module._apply

    def watched(*args):
        applied_in.append(threading.get_ident() == loop_thread)
        return apply(*args)

    monkeypatch.setattr(reports_module, "_apply", watched)
    monkeypatch.setattr("corral.store.off_loop.ON_LOOP", 2)
    async with store.write() as connection:
        await ingest_heartbeats(connection, [heartbeat(tasks[0], "BUILDING", "PREPARED")], NOW)
    assert applied_in == [True, True]  # as few as ON_LOOP: on the loop
    applied_in.clear()
    async with store.write() as connection:
        await ingest_heartbeats(connection, [heartbeat(task, "BUILDING") for task in tasks[1:]], NOW)
    assert applied_in == [False] * (WORKERS - 1)


@pytest.fixture(autouse=True)
def _quiet_refusal_log(caplog):
    caplog.set_level("ERROR", logger="corral.reports")


async def test_a_heartbeat_that_leaves_its_job_as_it_was_writes_no_job_row(store):
    job_id, tasks = await placed(store)
    async with store.write() as connection:
        await ingest_heartbeats(connection, [heartbeat(tasks[0], "BUILDING", "PREPARED", "RUNNING")], NOW)
    running = await job(store, job_id)
    statements = counted_statements(store)
    async with store.write() as connection:  # another task starts: the job stays as it is
        await ingest_heartbeats(connection, [heartbeat(tasks[1], "BUILDING", "PREPARED", "RUNNING")], NOW + 1)
    assert not [s for s in statements if s.lstrip().startswith("UPDATE jobs")]
    assert (await job(store, job_id)) == running
    for task in tasks:  # every task ends: the last heartbeat ends the job, and writes it
        states = ("SUCCEEDED",) if task in tasks[:2] else ("BUILDING", "PREPARED", "RUNNING", "SUCCEEDED")
        async with store.write() as connection:
            await ingest_heartbeats(connection, [heartbeat(task, *states)], NOW + 2)
    assert (await job(store, job_id)).state == "SUCCEEDED"
