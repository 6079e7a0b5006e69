"""A read that takes a connection from the pool only when it runs a statement: a submission whose settings are
kept in memory reads nothing, and takes none."""

from __future__ import annotations

from sqlalchemy import event, select

from corral.store.schema import workers
from tests.store.helpers import add_worker


async def test_a_read_that_runs_no_statement_takes_no_connection_and_one_that_does_takes_one(store):
    worker = await add_worker(store)
    taken: list[int] = []
    event.listen(store.engine.sync_engine.pool, "checkout", lambda *_: taken.append(1))
    given_back: list[int] = []
    event.listen(store.engine.sync_engine.pool, "checkin", lambda *_: given_back.append(1))
    async with store.read_when_needed():
        pass
    assert taken == [] and given_back == []
    async with store.read_when_needed() as connection:
        assert (await connection.execute(select(workers.c.id))).scalars().all() == [worker]
        assert (await connection.execute(select(workers.c.id).where(workers.c.id == worker))).scalar() == worker
        assert len(taken) == 1  # the second statement ran on the first one's connection
    assert given_back == [1]
