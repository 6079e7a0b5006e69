"""Settling jobs after their tasks changed: the one place where a job's state follows its tasks.

An independent job takes its state from task counts (DESIGN.md, "Job states"). Any job that is bound for an
end (cancelled, an outcome decided, a gang DetectTermination moved) kills its PENDING tasks,
which have nothing to stop, fixes its outcome once, and ends when no task is active.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.outcomes import derived_job_state
from corral.core.states import JOB_TERMINAL, JobState, TaskState
from corral.store.changes import ChangeSet
from corral.store.reads import task_row
from corral.store.schema import jobs, tasks

T = TaskState


async def settle_jobs(connection: AsyncConnection, job_ids: Collection[int], now: float, cause: str) -> ChangeSet:
    changes = ChangeSet(now)
    if not job_ids:
        return changes
    ids = list(job_ids)
    job_rows = (await connection.execute(
        select(jobs.c.id, jobs.c.state, jobs.c.gang, jobs.c.outcome, jobs.c.cancelled, jobs.c.max_task_failures)
        .where(jobs.c.id.in_(ids))
    )).all()
    counts: dict[int, Counter] = defaultdict(Counter)
    for row in (await connection.execute(
        select(tasks.c.job_id, tasks.c.state, func.count().label("n"))
        .where(tasks.c.job_id.in_(ids)).group_by(tasks.c.job_id, tasks.c.state)
    )).all():
        counts[row.job_id][T(row.state)] = row.n
    kill_pending: list[int] = []
    for job in job_rows:
        current = JobState(job.state)
        if current in JOB_TERMINAL or (job.gang and current is not JobState.TERMINATING):
            continue  # gangs move by their handlers until they terminate
        states = counts[job.id]
        outcome = JobState(job.outcome) if job.outcome else None
        new, outcome = _derive(states, job, outcome)
        if (new is JobState.TERMINATING or new in JOB_TERMINAL) and states[T.PENDING]:
            kill_pending.append(job.id)
            states[T.KILLED] += states.pop(T.PENDING)
            new, outcome = _derive(states, job, outcome)
        columns = {"outcome": str(outcome) if outcome else None}
        if (new is JobState.TERMINATING or new in JOB_TERMINAL) and outcome is not JobState.UNSCHEDULABLE:
            columns["pending_reason"] = None  # an UNSCHEDULABLE job keeps why it was never placed
        changes.job(job.id, current, new, handler=cause, message=_why(new, outcome, job.cancelled), **columns)
    if kill_pending:
        for row in (await connection.execute(
            select(*task_columns()).where(tasks.c.job_id.in_(kill_pending), tasks.c.state == T.PENDING)
        )).all():
            changes.task(task_row(row), T.KILLED, handler=cause, message="never placed; the job is ending")
    await changes.flush(connection)
    return changes


def task_columns():
    return (tasks.c.id, tasks.c.job_id, tasks.c.index, tasks.c.state, tasks.c.attempt, tasks.c.worker_id,
            tasks.c.failures, tasks.c.preemptions)


def _derive(states: Counter, job, outcome: JobState | None) -> tuple[JobState, JobState | None]:
    return derived_job_state(states.elements(), gang=job.gang, max_task_failures=job.max_task_failures,
                             outcome=outcome, cancelled=job.cancelled)


def _why(new: JobState, outcome: JobState | None, cancelled: bool) -> str | None:
    if new is JobState.TERMINATING:
        return "cancelled; stopping its tasks" if cancelled else f"bound for {outcome}; stopping its tasks"
    return None
