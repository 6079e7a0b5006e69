"""Preemption, for anyone who needs a task to stop this attempt and come back later.

The gang drain uses it, and so can priority preemption: `preempt_tasks` bumps the job's
epoch and orders the stops, the worker learns of them in its heartbeat replies, and
`acknowledge` ends each attempt once its worker confirms, with the epoch it was told.
`check_current` is the guard both an acknowledgement and a checkpoint upload must pass:
anything from another worker, attempt or epoch is refused and changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from corral.core.drain import preemption_move
from corral.core.states import Fact, JobState, TaskState
from corral.engine.attempts import end_attempt, requeue
from corral.engine.settle import settle_jobs
from corral.store.changes import ChangeSet, TaskRow
from corral.store.reads import task_row, tasks_with_budgets

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

log = logging.getLogger("corral.preemption")


class NoSuchTask(LookupError):
    pass


class NotCurrent(RuntimeError):
    """An acknowledgement or checkpoint for another worker, attempt or epoch: refused, nothing changed."""


@dataclass
class JobRef:
    id: int
    state: JobState
    epoch: int  # the job's preemption epoch before this preemption


def preempt_tasks(changes: ChangeSet, job: JobRef, rows: Iterable[TaskRow], *, handler: str, reason: str) -> int:
    """Order `rows` to stop this attempt and come back later, under a new epoch of the job; returns it.

    Started tasks go to PREEMPTING (their worker sends SIGTERM, waits the grace period, sends
    SIGKILL and acknowledges with the epoch); ASSIGNED ones go straight back to PENDING,
    releasing their reservation at no cost; any other task is left alone.
    """
    epoch = job.epoch + 1
    job.epoch = epoch
    changes.job_columns(job.id, job.state, preemption_epoch=epoch)
    for row in rows:
        move = preemption_move(row.state)
        if move is TaskState.PREEMPTING:
            changes.task(row, move, handler=handler, message=f"{reason} (epoch {epoch})", preempt_epoch=epoch)
            changes.attempt(row.id, row.attempt, state=move)
        elif move is TaskState.PENDING:
            changes.attempt(row.id, row.attempt, reason=f"released: {reason}", finished_at=changes.now)
            requeue(changes, row, handler=handler, message=f"released before it ran: {reason} (epoch {epoch})")
    return epoch


async def _current_row(connection: AsyncConnection, task_id: int):
    rows = await tasks_with_budgets(connection, task_ids=[task_id])
    if not rows:
        raise NoSuchTask(f"no task {task_id}")
    return rows[0]


def check_current(row, worker_id: str, attempt: int, epoch: int) -> None:
    """Raise NotCurrent unless the task's current attempt is PREEMPTING on this worker in this epoch."""
    if row.worker_id != worker_id:
        raise NotCurrent(f"task {row.id} is not on worker {worker_id}")
    if row.attempt != attempt:
        raise NotCurrent(f"task {row.id} is at attempt {row.attempt}, not {attempt}")
    if row.state != TaskState.PREEMPTING:
        raise NotCurrent(f"task {row.id} attempt {attempt} is {row.state}, not PREEMPTING")
    if row.preempt_epoch != epoch:
        raise NotCurrent(f"epoch {epoch} is not current: task {row.id} was told to preempt in epoch "
                         f"{row.preempt_epoch}")


async def acknowledge(connection: AsyncConnection, worker_id: str, task_id: int, *, attempt: int, epoch: int,
                      exit_code: int | None, reason: str | None, now: float) -> ChangeSet:
    """The worker confirms the attempt's processes are gone: the attempt ends PREEMPTED.

    A gang member's attempt is refunded and waits for the drain to complete; any other task is
    charged to its preemption budget and, with budget left, goes back to PENDING.
    """
    row = await _current_row(connection, task_id)
    check_current(row, worker_id, attempt, epoch)
    changes = ChangeSet(now)
    end_attempt(changes, task_row(row), TaskState.PREEMPTED, job=row, handler=Fact.WORKER, exit_code=exit_code,
                reason=reason or f"preempted (epoch {epoch})")
    await settle_jobs(connection, changes, changes.touched_jobs, Fact.WORKER)
    await changes.flush(connection)
    log.info("task preempted job=%s task=%s index=%s attempt=%s epoch=%s exit_code=%s", row.job_id, row.id,
             row.index, attempt, epoch, exit_code)
    return changes


async def record_checkpoint(connection: AsyncConnection, worker_id: str, task_id: int, *, attempt: int,
                            epoch: int, size: int, now: float) -> None:
    """Note that the task's checkpoint (already stored) was saved in this epoch: its next attempt gets it."""
    row = await _current_row(connection, task_id)
    check_current(row, worker_id, attempt, epoch)
    changes = ChangeSet(now)
    current = task_row(row)
    changes.task_columns(current, checkpoint_epoch=epoch, checkpoint_size=size)
    changes.record(row.job_id, "Checkpoint", "SUCCESS", None, None, f"{size} bytes saved (epoch {epoch})",
                   task=current)
    await changes.flush(connection)
    log.info("checkpoint saved job=%s task=%s attempt=%s epoch=%s bytes=%s", row.job_id, row.id, attempt, epoch,
             size)


async def check_checkpoint(connection: AsyncConnection, worker_id: str, task_id: int, *, attempt: int,
                           epoch: int) -> None:
    """Refuse an upload before its bytes are stored (NoSuchTask, NotCurrent)."""
    check_current(await _current_row(connection, task_id), worker_id, attempt, epoch)
