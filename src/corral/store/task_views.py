"""What the log, result and checkpoint endpoints read about one task."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.store.schema import attempts, jobs, tasks


async def task_at(connection: AsyncConnection, job_id: int, index: int):
    """The task's (id, state, attempt, exit_code, reason), or None."""
    return (await connection.execute(
        select(tasks.c.id, tasks.c.state, tasks.c.attempt, tasks.c.exit_code, tasks.c.reason)
        .where(tasks.c.job_id == job_id, tasks.c.index == index))).first()


async def job_replicas(connection: AsyncConnection, job_id: int) -> int | None:
    """How many tasks the job has; None: no such job."""
    return (await connection.execute(select(jobs.c.replicas).where(jobs.c.id == job_id))).scalar()


async def attempt_numbers(connection: AsyncConnection, task_id: int) -> list[int]:
    """The attempts the task has had, in order."""
    return list((await connection.execute(
        select(attempts.c.attempt).where(attempts.c.task_id == task_id).order_by(attempts.c.attempt))).scalars())


async def task_checkpoint(connection: AsyncConnection, task_id: int):
    """The task's (worker_id, checkpoint_epoch), or None."""
    return (await connection.execute(
        select(tasks.c.worker_id, tasks.c.checkpoint_epoch).where(tasks.c.id == task_id))).first()
