"""Cancelling a job: it goes to TERMINATING at once; its tasks stop through TerminateJobs."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.states import JOB_TERMINAL, JobState
from corral.engine.settle import settle_jobs
from corral.store.changes import ChangeSet
from corral.store.schema import jobs


class NoSuchJob(LookupError):
    pass


class AlreadyEnded(RuntimeError):
    pass


async def cancel_job(connection: AsyncConnection, job_id: int, now: float) -> None:
    """Idempotent while the job is active; PENDING tasks are KILLED now, placed ones stopped later."""
    row = (await connection.execute(select(jobs.c.state, jobs.c.cancelled).where(jobs.c.id == job_id))).first()
    if row is None:
        raise NoSuchJob(f"no job {job_id}")
    if JobState(row.state) in JOB_TERMINAL:
        raise AlreadyEnded(f"job {job_id} already ended {row.state}")
    if row.cancelled:
        return
    changes = ChangeSet(now)
    changes.job(job_id, JobState(row.state), JobState.TERMINATING, handler="Cancel",
                message="cancelled by a user", cancelled=True)
    await changes.flush(connection)
    await settle_jobs(connection, [job_id], now, "Cancel")
