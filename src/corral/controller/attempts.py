"""What happens when an attempt ends: charge it to the task's budget and maybe queue a new one.

Shared by worker reports and the reaper, so WORKER_FAILED and FAILED follow one rule.
"""

from __future__ import annotations

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
    exit_code: int | None = None,
    reason: str | None = None,
    oom_killed: bool = False,
) -> None:
    """Record `ended` for the task's current attempt; an independent task with budget left goes back to PENDING."""
    ever_ran = row.state is not TaskState.ASSIGNED
    message = reason or (f"exit code {exit_code}" if exit_code is not None else None)
    changes.task(row, ended, handler=handler, message=message, exit_code=exit_code, reason=reason)
    changes.attempt(row.id, row.attempt, state=ended, exit_code=exit_code, reason=reason,
                    finished_at=changes.now, **({"oom_killed": True} if oom_killed else {}))
    assert ended in TASK_TERMINAL
    if job.gang or JobState(job.job_state) not in RETRYABLE_JOB_STATES or job.cancelled:
        return
    decision = after_attempt(
        ended,
        Budget(job.max_retries_failure, job.max_retries_preemption, row.failures, row.preemptions),
        ever_ran=ever_ran,
    )
    row.failures, row.preemptions = decision.failures, decision.preemptions
    changes.task_columns(row, failures=decision.failures, preemptions=decision.preemptions)
    if decision.retry:
        budget = (f"failure {decision.failures} of {job.max_retries_failure} allowed" if ended is TaskState.FAILED
                  else f"preemption {decision.preemptions} of {job.max_retries_preemption} allowed")
        changes.task(row, TaskState.PENDING, handler="Retry", message=f"attempt {row.attempt} {ended}; {budget}",
                     worker_id=None, gpu_ids=[], attempt=row.attempt + 1)
        row.attempt += 1
        row.worker_id = None
