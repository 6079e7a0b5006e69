"""What retention asks the store: when the jobs of given tasks ended."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.store.schema import jobs, tasks

BATCH = 500  # task ids per query, well under any database's limit on bound parameters


async def job_finish_times(connection: AsyncConnection, task_ids: Iterable[int]) -> dict[int, float | None]:
    """Each known task's job's `finished_at` (None while it has not ended); unknown tasks are left out."""
    ids = list(task_ids)
    found: dict[int, float | None] = {}
    for start in range(0, len(ids), BATCH):
        rows = await connection.execute(
            select(tasks.c.id, jobs.c.finished_at).join(jobs, jobs.c.id == tasks.c.job_id)
            .where(tasks.c.id.in_(ids[start:start + BATCH])))
        found.update({row.id: row.finished_at for row in rows})
    return found
