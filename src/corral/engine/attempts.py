"""What happens when an attempt ends: charge it to the task's budget and maybe queue a new one.

Shared by worker reports, acknowledgements, the reaper and the handlers, so WORKER_FAILED,
FAILED and PREEMPTED follow one rule wherever they come from.
"""

from __future__ import annotations

from corral.core.failure import environment_build_failed
from corral.core.outcomes import Budget, after_attempt
from corral.core.states import TASK_TERMINAL, JobState, TaskState
from corral.store.changes import ChangeSet, TaskRow

RETRYABLE_JOB_STATES = frozenset({JobState.PENDING, JobState.RUNNING})


def end_attempt(
    changes: ChangeSet,
    row: TaskRow,
    ended: TaskState,
    *,
    job,  # a row with gang, job_state, cancelled and the two max_retries_* columns
    handler: str,
    result: str = "SUCCESS",
    exit_code: int | None = None,
    reason: str | None = None,
    oom_killed: bool = False,
    finished_at: float | None = None,
) -> None:
    """Record `ended` for the task's current attempt and charge it to the task's budget.

    `finished_at` is when the attempt was last known to run, if that is earlier than now: the worker's
    time of the exit it reports late (the controller was down), or a lost worker's last heartbeat.

    An independent task with budget left goes back to PENDING. A gang member's next attempt
    is the gang drain's to decide; a gang member stopped by a preemption (a drain) is
    refunded: its attempt costs nothing, so only real failures use up a gang's budget.
    """
    was = row.state
    ever_ran = was is not TaskState.ASSIGNED
    message = reason or (f"exit code {exit_code}" if exit_code is not None else None)
    changes.task(row, ended, handler=handler, result=result, message=message, exit_code=exit_code, reason=reason)
    changes.attempt(row.id, row.attempt, state=ended, exit_code=exit_code, reason=reason,
                    finished_at=changes.now if finished_at is None else min(finished_at, changes.now),
                    **({"oom_killed": True} if oom_killed else {}))
    assert ended in TASK_TERMINAL
    if job.gang and was is TaskState.PREEMPTING:
        changes.attempt(row.id, row.attempt, refunded=True)
        return
    if job.cancelled or not job.gang and JobState(job.job_state) not in RETRYABLE_JOB_STATES:
        return
    decision = after_attempt(
        ended,
        Budget(job.max_retries_failure, job.max_retries_preemption, row.failures, row.preemptions),
        ever_ran=ever_ran, final=environment_build_failed(reason),
    )
    row.failures, row.preemptions = decision.failures, decision.preemptions
    changes.task_columns(row, failures=decision.failures, preemptions=decision.preemptions)
    if decision.retry and not job.gang:
        budget = (f"failure {decision.failures} of {job.max_retries_failure} allowed" if ended is TaskState.FAILED
                  else f"preemption {decision.preemptions} of {job.max_retries_preemption} allowed")
        requeue(changes, row, handler="Retry", message=f"attempt {row.attempt} {ended}; {budget}")


def requeue(changes: ChangeSet, row: TaskRow, *, handler: str, message: str | None,
            result: str = "SUCCESS") -> None:
    """Back to PENDING, off its worker: the next placement starts a new attempt."""
    changes.task(row, TaskState.PENDING, handler=handler, result=result, message=message,
                 worker_id=None, gpu_ids=[], attempt=row.attempt + 1)
    row.attempt += 1
    row.worker_id = None
