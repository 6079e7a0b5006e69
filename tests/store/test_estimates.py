"""Start estimates over the real store: made from the queue and the running tasks, rewritten only when they move,
told when they move far, and held to account when the job starts."""

from __future__ import annotations

import threading
from contextlib import asynccontextmanager

import pytest
from sqlalchemy import select

from corral.engine.estimates import RECORDS_KEPT, Estimator
from corral.scheduling.durations import Run
from corral.store import estimates as estimates_store
from corral.store.estimates import read_estimates, settled_since
from corral.store.schema import estimate_records
from tests.store.helpers import NOW, add_worker, job_history, job_tasks, report, settle, submit


async def _estimates(store):
    async with store.read() as connection:
        return await read_estimates(connection)


async def _running(store, worker, job_id, now=NOW):
    for task in await job_tasks(store, job_id):
        await report(store, worker, (task.id, task.attempt, "BUILDING"), (task.id, task.attempt, "PREPARED"), now=now)
        await settle(store, now=now)
        await report(store, worker, (task.id, task.attempt, "RUNNING"), now=now)
        await settle(store, now=now)


async def _one_behind_another(store, **first_spec) -> tuple[str, int, int]:
    """A worker with room for one job, running the first; the second waits. (worker, first, second)"""
    worker = await add_worker(store, cpu=1)
    first = await submit(store, **first_spec)
    await settle(store)
    await _running(store, worker, first)
    second = await submit(store)
    await settle(store)
    return worker, first, second


async def test_a_job_behind_one_with_a_time_limit_starts_when_that_limit_ends(store):
    _, first, second = await _one_behind_another(store, time_limit=600)
    made = await Estimator().run(store, NOW + 100)
    assert list(made) == [second]
    estimate = (await _estimates(store))[second]
    assert estimate.start_at == pytest.approx(NOW + 600, abs=1) and estimate.after_job == first
    assert estimate.basis == f"job {first}'s end: its time limit"


async def test_learned_durations_stand_in_for_a_missing_time_limit(store):
    _, first, second = await _one_behind_another(store, name="train")
    estimator = Estimator()
    estimator.ended = estimator.ended.__class__([Run("default", "train", (1.0, 0, 0.0), 900)] * 3)
    estimator.learned_at = NOW + 100
    await estimator.run(store, NOW + 100)
    estimate = (await _estimates(store))[second]
    assert estimate.start_at == pytest.approx(NOW + 900, abs=1)
    assert estimate.basis == f"job {first}'s end: the runs of 3 similar jobs"


async def test_the_running_tasks_count_as_lasting_at_least_their_age(store):
    """Half the ended runs took 50 s, half 200 s; the running task has lasted 100 s, so fewer than 4 in 7 last
    past 50 s, and a share of 0.45 lands on 200 s where the ended runs alone put it on 50 s."""
    await _one_behind_another(store, name="train")
    estimator = Estimator()
    estimator.ended = estimator.ended.__class__([Run("default", "train", (1.0, 0, 0.0), s) for s in [50, 200] * 3])
    estimator.learned_at = NOW + 100
    await estimator.run(store, NOW + 100)
    assert estimator.ended.duration("default", "train", (1.0, 0, 0.0), 0.45).seconds == 50
    assert estimator.model.duration("default", "train", (1.0, 0, 0.0), 0.45).seconds == 200


async def test_a_job_no_worker_can_fit_is_unknown_and_says_why(store):
    await add_worker(store, cpu=1)
    job_id = await submit(store, resources={"cpu": 8})
    await settle(store)
    await Estimator().run(store, NOW)
    estimate = (await _estimates(store))[job_id]
    assert estimate.start_at is None and estimate.never
    assert estimate.unknown.startswith("no worker can ever fit it: ")


async def test_an_unmoved_estimate_is_not_rewritten_and_a_far_move_is_on_record(store):
    worker, first, second = await _one_behind_another(store, time_limit=3600)
    estimator = Estimator()
    await estimator.run(store, NOW + 10)
    await estimator.run(store, NOW + 20)
    assert (await _estimates(store))[second].made_at == NOW + 10  # it did not move: not rewritten
    # The running job ends early: the waiting one starts at once, far sooner than it was told.
    (task,) = await job_tasks(store, first)
    await report(store, worker, (task.id, task.attempt, "SUCCEEDED", 0), now=NOW + 30)
    await estimator.run(store, NOW + 30)  # before the scheduler placed it
    moves = [h.message for h in await job_history(store, second) if h.handler == "EstimateStarts"]
    assert moves == ["start estimate moved: ~1h after job 1 -> now"]


async def test_once_a_job_starts_its_estimates_are_held_to_account(store):
    worker, first, second = await _one_behind_another(store, time_limit=600)
    estimator = Estimator()
    await estimator.run(store, NOW + 100)
    (task,) = await job_tasks(store, first)
    await report(store, worker, (task.id, task.attempt, "SUCCEEDED", 0), now=NOW + 500)
    await settle(store, now=NOW + 500)  # placed at NOW + 500: the estimate said NOW + 600
    await estimator.run(store, NOW + 505)
    assert second not in await _estimates(store)
    async with store.read() as connection:
        (record,) = await settled_since(connection, 0)
        rows = (await connection.execute(select(estimate_records))).all()
    assert (record.made_at, record.start_at, record.started_at) == (NOW + 100, pytest.approx(NOW + 600, abs=1),
                                                                      NOW + 500)
    assert record.error == pytest.approx(100, abs=1) and len(rows) == 1
    await estimator.run(store, NOW + 500 + RECORDS_KEPT + 1)  # a year on, the record is forgotten
    async with store.read() as connection:
        assert await settled_since(connection, 0) == []


async def test_one_controller_estimates_per_period(store):
    await add_worker(store, cpu=1)
    await submit(store, resources={"cpu": 2})
    await settle(store)
    first, second = Estimator(), Estimator()
    assert await first.run_if_due(store, NOW)
    assert not await first.run_if_due(store, NOW + 1)  # not due yet
    assert not await second.run_if_due(store, NOW + 1)  # due, but the other controller's pass is fresh
    assert await second.run_if_due(store, NOW + 6)
    assert not await first.run_if_due(store, NOW + 7)  # due again, and the other's pass is fresh


@pytest.fixture
def writes(store, monkeypatch) -> list[str | None]:
    """The handler of each write transaction the store is asked for."""
    taken: list[str | None] = []
    write = store.write

    @asynccontextmanager
    async def counted(handler=None, **kwargs):
        taken.append(handler)
        async with write(handler, **kwargs) as connection:
            yield connection

    monkeypatch.setattr(store, "write", counted)
    return taken


async def test_an_idle_cluster_takes_no_pass_and_no_write(store, writes):
    await add_worker(store)
    writes.clear()
    estimator = Estimator()
    assert not await estimator.run_if_due(store, NOW)
    assert not await estimator.run_if_due(store, NOW + 6)
    assert writes == []


async def test_an_estimate_left_when_its_job_started_is_cleared_then_the_passes_stop(store, writes):
    worker, first, second = await _one_behind_another(store, time_limit=600)
    estimator = Estimator()
    assert await estimator.run_if_due(store, NOW + 100)
    assert second in await _estimates(store)
    (task,) = await job_tasks(store, first)
    await report(store, worker, (task.id, task.attempt, "SUCCEEDED", 0), now=NOW + 500)
    await settle(store, now=NOW + 500)  # the second is placed: nothing pending, its estimate still stored
    writes.clear()
    assert await estimator.run_if_due(store, NOW + 505)  # clears it and settles its record
    assert writes == ["EstimateStarts"] and await _estimates(store) == {}
    writes.clear()
    assert not await estimator.run_if_due(store, NOW + 510)
    assert writes == []
    await submit(store, resources={"cpu": 2})  # pending again (too large to be placed): the passes resume
    await settle(store, now=NOW + 515)
    writes.clear()
    assert await estimator.run_if_due(store, NOW + 515)
    assert writes == ["EstimateStarts"]


async def test_statements_over_many_jobs_are_split(store, monkeypatch):
    monkeypatch.setattr(estimates_store, "CHUNK", 1)  # as 100k job ids would be, past what SQLite binds at once
    worker = await add_worker(store, cpu=2)
    first = await submit(store, time_limit=600, resources={"cpu": 2})
    await settle(store)
    await _running(store, worker, first)
    waiting = [await submit(store) for _ in range(3)]
    await settle(store)
    estimator = Estimator()
    await estimator.run(store, NOW + 100)
    assert sorted(await _estimates(store)) == waiting
    (task,) = await job_tasks(store, first)
    await report(store, worker, (task.id, task.attempt, "SUCCEEDED", 0), now=NOW + 500)
    await settle(store, now=NOW + 500)  # two of the three start
    await estimator.run(store, NOW + 505)
    assert len(await _estimates(store)) == 1
    async with store.read() as connection:
        assert len(await settled_since(connection, 0)) == 2


async def test_a_requests_estimator_has_its_own_index_and_the_learned_durations(store):
    await add_worker(store, cpu=1)
    await submit(store, resources={"cpu": 2})
    await settle(store)
    engine = Estimator()
    await engine.run(store, NOW)
    request = engine.beside()
    assert request.ended is engine.ended and request.kept is not engine.kept
    situation, _, _ = await request.situation(store, NOW + 1)  # within the learning period: no runs read again
    assert request.ended is engine.ended and len(situation.waiting) == 1


async def test_the_situation_is_made_off_the_event_loop(store, monkeypatch):
    """Looking up every task's duration takes a long queue hundreds of milliseconds: the loop answers heartbeats
    meanwhile, so none of it runs on the loop's thread."""
    await _one_behind_another(store, time_limit=600)
    estimator = Estimator()
    looked_up_on = set()
    duration = estimator._duration

    def watched(*args):
        looked_up_on.add(threading.get_ident())
        return duration(*args)

    monkeypatch.setattr(estimator, "_duration", watched)
    situation, pending, _ = await estimator.situation(store, NOW + 100)
    assert situation.waiting and situation.ending and pending
    assert looked_up_on and threading.get_ident() not in looked_up_on


async def test_the_situations_equal_requests_are_one_object(store):
    """The simulation tells a unit alike the one before by identity first: equal requests, read per job, are handed
    to it as one object, and unequal ones stay apart."""
    await add_worker(store, cpu=1)
    first, second = await submit(store, resources={"cpu": 2}), await submit(store, resources={"cpu": 2})
    other = await submit(store, resources={"cpu": 3})
    await settle(store)
    situation, _, _ = await Estimator().situation(store, NOW)
    request = {item.unit.job_id: item.unit.request for item in situation.waiting}
    assert request[first] is request[second] and request[first] != request[other]
