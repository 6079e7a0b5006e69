"""Heartbeats that carry only liveness are marked together: one commit for all that arrive at once, each one still
refused when its worker is unknown or LOST, and none answered before its mark is committed."""

from __future__ import annotations

import asyncio
import time

import pytest
from sqlalchemy import select

from corral.engine.reports import MARK_STEP, WRITE_MARKS_EVERY, SeenMarks, UnknownWorker
from corral.store.schema import workers
from corral.store.worker_state import mark_all_seen
from tests.store.helpers import NOW, add_worker, reap

LOSS_TIMEOUT = 30.0


async def last_heartbeats(store) -> dict[str, float]:
    async with store.read() as connection:
        return dict((await connection.execute(select(workers.c.id, workers.c.last_heartbeat))).all())


async def test_marks_arriving_together_share_one_commit(store):
    ids = [await add_worker(store, f"w{i}", now=NOW) for i in range(40)]
    commits = []
    store.on_commit.append(lambda: commits.append(1))
    marks = SeenMarks(store, LOSS_TIMEOUT)
    await asyncio.gather(*(marks.seen(worker_id) for worker_id in ids))
    assert len(commits) <= 2  # the first mark's own transaction, then every one that queued behind it
    assert all(seen > NOW for seen in (await last_heartbeats(store)).values())


async def test_an_unknown_or_lost_worker_is_refused_and_the_others_are_marked(store):
    lost = await add_worker(store, "lost", now=NOW)
    await reap(store, NOW + 60, loss_timeout=30)
    alive = await add_worker(store, "alive", now=NOW + 60)
    marks = SeenMarks(store, LOSS_TIMEOUT)
    outcomes = await asyncio.gather(marks.seen(alive), marks.seen(lost), marks.seen("never-registered"),
                                    return_exceptions=True)
    assert outcomes[0] is None
    assert [type(outcome) for outcome in outcomes[1:]] == [UnknownWorker, UnknownWorker]
    seen = await last_heartbeats(store)
    assert seen[alive] > NOW + 60 and seen[lost] == NOW  # a LOST row is not brought back to life


async def test_a_failed_write_fails_every_heartbeat_of_its_batch_and_the_next_batch_is_written(store):
    worker_id = await add_worker(store, "w", now=NOW)
    marks = SeenMarks(store, LOSS_TIMEOUT)
    real_write = store.write

    def broken(**_options):
        raise OSError("disk gone")

    store.write = broken
    with pytest.raises(OSError):
        await marks.seen(worker_id)
    store.write = real_write
    await marks.seen(worker_id)
    assert (await last_heartbeats(store))[worker_id] > NOW


async def test_a_mark_takes_the_writer_before_the_writes_queued_ahead_of_it(store):
    """Under overload the writer is held back to back by report groups and the engine's passes: a worker's liveness
    mark does not wait behind them all, only for the write that holds the writer."""
    worker_id = await add_worker(store, "w", now=NOW)
    marks, committed, holding, release = SeenMarks(store, LOSS_TIMEOUT), [], asyncio.Event(), asyncio.Event()

    async def holder() -> None:
        async with store.write():
            holding.set()
            await release.wait()
        committed.append("holder")

    async def ordinary() -> None:
        async with store.write():
            pass
        committed.append("ordinary")

    async def mark() -> None:
        await marks.seen(worker_id)
        committed.append("mark")

    async with asyncio.timeout(10):
        held = asyncio.create_task(holder())
        await holding.wait()
        queued = [asyncio.create_task(ordinary()) for _ in range(3)]
        marked = asyncio.create_task(mark())
        while len(store._write_lock._liveness) + len(store._write_lock._ordinary) < 4:  # all in line
            await asyncio.sleep(0)
        release.set()
        await asyncio.gather(held, marked, *queued)
    assert committed == ["holder", "mark", "ordinary", "ordinary", "ordinary"]


async def test_a_worker_confirmed_lately_is_answered_at_once_and_its_heartbeats_time_written_within_the_period(store):
    """A worker marked ALIVE here less than half the loss timeout ago cannot have been declared lost yet: its
    heartbeat is answered without waiting for the writer, and the time it came is written with the next marks."""
    worker_id = await add_worker(store, "w", now=NOW)
    marks = SeenMarks(store, LOSS_TIMEOUT)
    await marks.seen(worker_id)  # not confirmed here yet: answered once its mark is committed
    commits = []
    store.on_commit.append(lambda: commits.append(1))
    came = time.time()
    await marks.seen(worker_id)
    answered = time.time()
    assert commits == []
    async with asyncio.timeout(WRITE_MARKS_EVERY * 10):
        while not commits:
            await asyncio.sleep(0.01)
    assert came - MARK_STEP <= (await last_heartbeats(store))[worker_id] <= answered
    # a reaper of any controller sharing the store judges that heartbeat: live until a loss timeout after it
    assert (await reap(store, came - MARK_STEP + LOSS_TIMEOUT - 0.01, LOSS_TIMEOUT)).empty
    assert not (await reap(store, answered + LOSS_TIMEOUT + 0.01, LOSS_TIMEOUT)).empty


async def test_a_worker_confirmed_longer_ago_than_half_the_loss_timeout_waits_for_its_mark_and_is_refused_if_lost(
        store):
    worker_id = await add_worker(store, "w", now=NOW)
    now = [time.time()]
    marks = SeenMarks(store, LOSS_TIMEOUT, clock=lambda: now[0])
    await marks.seen(worker_id)
    now[0] += LOSS_TIMEOUT / 2  # half the loss timeout since the mark
    await reap(store, time.time() + 60, loss_timeout=30)  # another controller's reaper, say
    with pytest.raises(UnknownWorker):
        await marks.seen(worker_id)
    with pytest.raises(UnknownWorker):  # and forgotten here: refused again
        await marks.seen(worker_id)


async def test_a_mark_never_moves_a_last_heartbeat_back_and_each_worker_gets_its_own_time(store):
    first, second = await add_worker(store, "a", now=NOW), await add_worker(store, "b", now=NOW)
    async with store.write(moves_state=False) as connection:
        assert await mark_all_seen(connection, {first: NOW + 10, second: NOW + 3}) == {first, second}
    async with store.write(moves_state=False) as connection:
        assert await mark_all_seen(connection, {first: NOW + 5, second: NOW + 7}) == {first, second}
    seen = await last_heartbeats(store)
    assert (seen[first], seen[second]) == (NOW + 10, NOW + 7)


async def test_closing_writes_the_marks_not_yet_written(store):
    worker_id = await add_worker(store, "w", now=NOW)
    marks = SeenMarks(store, LOSS_TIMEOUT)
    await marks.seen(worker_id)
    came = time.time()
    await marks.seen(worker_id)  # answered at once, its mark due within the period
    await marks.close()
    assert (await last_heartbeats(store))[worker_id] >= came - MARK_STEP
