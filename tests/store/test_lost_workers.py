"""LOST worker rows do not pile up: a worker back under its name replaces its row, and old ones are forgotten."""

from __future__ import annotations

from sqlalchemy import select

from corral.engine.reports import prune_lost_workers
from corral.store.schema import history, workers
from tests.store.helpers import NOW, add_worker, reap


async def rows(store) -> list[tuple[str, str, str]]:
    async with store.read() as connection:
        return [tuple(r) for r in (await connection.execute(
            select(workers.c.id, workers.c.name, workers.c.state).order_by(workers.c.registered_at)))]


async def test_a_worker_back_under_its_name_replaces_its_lost_row(store):
    first = await add_worker(store, "w1", now=NOW)
    other = await add_worker(store, "w2", now=NOW)
    await reap(store, NOW + 60, loss_timeout=30)
    assert [state for *_, state in await rows(store)] == ["LOST", "LOST"]
    again = await add_worker(store, "w1", now=NOW + 61)
    assert await rows(store) == [(other, "w2", "LOST"), (again, "w1", "ALIVE")]
    async with store.read() as connection:
        said = (await connection.execute(select(history.c.message).where(history.c.worker_id == again))).scalar_one()
    assert said.endswith(f"; replaces lost {first}")
    await add_worker(store, "w1", now=NOW + 62)  # an ALIVE namesake is another process: both stay
    assert [name for _, name, _ in await rows(store)] == ["w2", "w1", "w1"]


async def test_lost_workers_are_forgotten_after_the_retention_from_their_last_heartbeat(store):
    lost = await add_worker(store, "old", now=NOW)
    alive = await add_worker(store, "fresh", now=NOW + 100)
    await reap(store, NOW + 60, loss_timeout=30)
    async with store.write() as connection:
        assert await prune_lost_workers(connection, before=NOW - 1) == 0
    assert [r[0] for r in await rows(store)] == [lost, alive]
    async with store.write() as connection:
        assert await prune_lost_workers(connection, before=NOW + 1000) == 1  # the ALIVE one stays, however old
    assert [r[0] for r in await rows(store)] == [alive]
