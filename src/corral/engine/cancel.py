"""Cancelling a job, a user's reported fact: it goes to TERMINATING at once; its tasks stop through TerminateJobs.
Cancelling an ended job's scheduled retry ends its chain."""

from __future__ import annotations

from typing import TYPE_CHECKING

from corral.core.retries import RetryState
from corral.core.states import JOB_TERMINAL, Fact, JobState
from corral.engine.settle import settle_jobs
from corral.store.changes import ChangeSet, StaleWrite
from corral.store.reads import job_for_cancel
from corral.store.retries import retry_state_of

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection


class NoSuchJob(LookupError):
    pass


class AlreadyEnded(RuntimeError):
    pass


async def cancel(connection: AsyncConnection, changes: ChangeSet, job_id: int) -> None:
    """Add the cancel to `changes`: idempotent while the job is active; PENDING tasks are KILLED now, placed ones
    stopped later."""
    row = await job_for_cancel(connection, job_id)
    if row is None:
        raise NoSuchJob(f"no job {job_id}")
    state = JobState(changes.job_value(job_id, "state", row.state))
    if state in JOB_TERMINAL:
        raise AlreadyEnded(f"job {job_id} already ended {state}")
    if changes.job_value(job_id, "cancelled", row.cancelled):
        return
    changes.job(job_id, state, JobState.TERMINATING, handler=Fact.CANCEL, message="cancelled by a user",
                cancelled=True)
    await settle_jobs(connection, changes, [job_id], Fact.CANCEL)


async def cancel_job(connection: AsyncConnection, job_id: int, now: float) -> ChangeSet:
    """A user's cancel of one job, written."""
    changes = ChangeSet(now)
    await cancel(connection, changes, job_id)
    await changes.flush(connection)
    return changes


async def cancel_scheduled_retry(connection: AsyncConnection, job_id: int, now: float) -> bool:
    """A user stops an ended job's pending retry (and so its chain); False when none is pending."""
    row = await retry_state_of(connection, job_id)
    if row is None or row.retry_state != RetryState.SCHEDULED:
        return False
    changes = ChangeSet(now)
    changes.retry(job_id, RetryState.SCHEDULED, RetryState.NOT_RETRIED, by=Fact.CANCEL)
    changes.record(job_id, Fact.CANCEL, "SKIPPED", row.state, None, "its scheduled retry was cancelled by a user")
    try:
        await changes.flush(connection)
    except StaleWrite:
        return False  # dispatched meanwhile
    return True
