"""Settling jobs after their tasks changed: the one place where a job's state follows its tasks.

An independent job takes its state from task counts (DESIGN.md, "Job states"). Any job that is bound for an
end (cancelled, an outcome decided, a gang DetectTermination moved) kills its PENDING tasks,
which have nothing to stop, fixes its outcome once, and ends when no task is active.

It reads the store as it was before the ChangeSet it adds to, and the set for what is not written yet,
so a handler run or a heartbeat is written in one flush. A job whose row its tasks' moves leave as it is (a task
started or ended beside others still running: most heartbeats) is not written: the row was read locked
(`settle_rows`, FOR UPDATE; SQLite has one writer), so no other transaction can have moved it since, which the
fenced update (`WHERE state = :expected`) would otherwise check at the price of a statement per heartbeat.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from typing import TYPE_CHECKING

from corral.core.outcomes import derived_job_state
from corral.core.states import JOB_TERMINAL, Fact, JobState, TaskState
from corral.store.changes import ChangeSet
from corral.store.reads import pending_tasks, settle_rows

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

T = TaskState


async def settle_jobs(connection: AsyncConnection, changes: ChangeSet, job_ids: Collection[int], cause: str) -> None:
    """Add to `changes` what their tasks' moves in it make of these jobs (recorded under `cause`)."""
    if not job_ids:
        return
    ids = set(job_ids)
    job_rows, counts = await settle_rows(connection, ids)
    for row, read in changes.moved_tasks(ids):
        counts[row.job_id][read] -= 1
        counts[row.job_id][row.state] += 1
    kill_pending: list[int] = []
    for job in job_rows:
        current = JobState(changes.job_value(job.id, "state", job.state))
        if current in JOB_TERMINAL or (job.gang and current is not JobState.TERMINATING):
            continue  # gangs move by their handlers until they terminate
        states = counts[job.id]
        read_outcome = changes.job_value(job.id, "outcome", job.outcome)
        cancelled = changes.job_value(job.id, "cancelled", job.cancelled)
        outcome = JobState(read_outcome) if read_outcome else None
        new, outcome = _derive(states, job, outcome, cancelled)
        if (new is JobState.TERMINATING or new in JOB_TERMINAL) and states[T.PENDING]:
            kill_pending.append(job.id)
            states[T.KILLED] += states.pop(T.PENDING)
            new, outcome = _derive(states, job, outcome, cancelled)
        columns = {"outcome": str(outcome) if outcome else None}
        if (new is JobState.TERMINATING or new in JOB_TERMINAL) and outcome is not JobState.UNSCHEDULABLE:
            columns["pending_reason"] = None  # an UNSCHEDULABLE job keeps why it was never placed
        elif new is current and columns["outcome"] == read_outcome:
            continue  # nothing of the row moves: no write (its row is locked since settle_rows read it)
        changes.job(job.id, current, new, handler=cause, by=Fact.SETTLE, message=_why(new, outcome, cancelled),
                    **columns)
    if kill_pending:
        unplaced = {row.id: changes.row(row.id) or row for row in await pending_tasks(connection, kill_pending)}
        unplaced.update((row.id, row) for row, _ in changes.moved_tasks(kill_pending))  # requeued in this set
        for row in unplaced.values():
            if row.state is T.PENDING:
                changes.task(row, T.KILLED, handler=cause, by=Fact.SETTLE, message="never placed; the job is ending")


def _derive(states: Counter, job, outcome: JobState | None, cancelled: bool) -> tuple[JobState, JobState | None]:
    return derived_job_state((+states).elements(), gang=job.gang, max_task_failures=job.max_task_failures,
                             outcome=outcome, cancelled=cancelled)


def _why(new: JobState, outcome: JobState | None, cancelled: bool) -> str | None:
    if new is JobState.TERMINATING:
        return "cancelled; stopping its tasks" if cancelled else f"bound for {outcome}; stopping its tasks"
    return None
