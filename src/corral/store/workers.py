"""What the worker list and the overview read about workers: their rows and what their tasks hold."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.states import TASK_HOLDS_RESOURCES
from corral.store.schema import tasks, workers


async def worker_rows(connection: AsyncConnection) -> list:
    """Full `workers` rows, oldest registration first."""
    return list((await connection.execute(select(workers).order_by(workers.c.registered_at))).all())


async def held_by_worker(connection: AsyncConnection) -> dict:
    """Per worker id, the (cpu, memory, gpu) its tasks hold and how many tasks hold them (`n`); a worker
    whose tasks hold nothing is left out."""
    return {
        r.worker_id: r
        for r in (await connection.execute(
            select(tasks.c.worker_id, func.sum(tasks.c.cpu).label("cpu"), func.sum(tasks.c.memory).label("memory"),
                   func.sum(tasks.c.gpu).label("gpu"), func.count().label("n"))
            .where(tasks.c.state.in_([str(s) for s in TASK_HOLDS_RESOURCES]), tasks.c.worker_id.is_not(None))
            .group_by(tasks.c.worker_id))).all()
    }
