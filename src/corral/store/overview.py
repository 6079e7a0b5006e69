"""What the cluster overview counts: jobs and tasks by state, and the jobs with tasks waiting to be placed."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.states import JOB_TERMINAL, TaskState
from corral.store.schema import jobs, tasks


async def jobs_by_state(connection: AsyncConnection) -> dict[str, int]:
    return dict((await connection.execute(select(jobs.c.state, func.count()).group_by(jobs.c.state))).all())


async def tasks_by_state(connection: AsyncConnection) -> dict[str, int]:
    return dict((await connection.execute(select(tasks.c.state, func.count()).group_by(tasks.c.state))).all())


async def waiting_jobs(connection: AsyncConnection) -> list:
    """Jobs not ended with PENDING tasks: (id, created_at, n waiting, and pool where the schema has one)."""
    pool = jobs.c.get("pool")
    columns = [jobs.c.id, jobs.c.created_at, func.count().label("n")] + ([pool] if pool is not None else [])
    return list((await connection.execute(
        select(*columns).select_from(tasks.join(jobs, tasks.c.job_id == jobs.c.id))
        .where(tasks.c.state == TaskState.PENDING, jobs.c.state.not_in([str(s) for s in JOB_TERMINAL]))
        .group_by(*[c for c in columns if c.name != "n"]))).all())
