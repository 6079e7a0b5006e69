"""Why a job failed, read from what it recorded: the one classification the retry policy trusts."""

from __future__ import annotations

from dataclasses import dataclass

from corral.core.retry_policy import FailureCause
from corral.core.states import TASK_PREEMPTION_OUTCOMES, JobState, TaskState

C, T = FailureCause, TaskState

# How a worker begins the reason of an attempt whose Python environment could not be built.
ENVIRONMENT_BUILD_FAILED = "environment build failed"


def environment_build_failed(reason: str | None) -> bool:
    """Whether an attempt ended because its environment could not be built: the same inputs would fail again."""
    return reason is not None and reason.startswith(f"{ENVIRONMENT_BUILD_FAILED}:")


@dataclass(frozen=True)
class TaskEnd:
    """How the last attempt of one task ended: its state, the state it ended from, its exit."""

    state: TaskState
    ended_from: TaskState | None = None
    exit_code: int | None = None
    oom_killed: bool = False
    reason: str | None = None


@dataclass(frozen=True)
class JobEnd:
    state: JobState
    cancelled: bool
    tasks: tuple[TaskEnd, ...] = ()
    expired: bool = False  # a handler's phase timeout moved it to its end (an EXPIRED history record)


def classify_failure(end: JobEnd) -> FailureCause:
    """The cause of a job's failure, checked in this order, the first that holds deciding:

    1. cancelled by a user                                  -> user_cancelled
    2. not placed in time (UNSCHEDULABLE), or a phase expiry -> scheduler_timeout
    3. a task's worker reported an OOM kill                  -> oom_killed
    4. a task's Python environment could not be built       -> environment_build_failed
    5. a task failed while BUILDING                          -> build_failure
    6. a task FAILED with a non-zero exit code              -> nonzero_exit
    7. the job is LOST, or a task's worker died / preempted -> agent_transient
    8. anything else (a time limit, no record)               -> unknown
    """
    tasks = end.tasks
    if end.cancelled or end.state is JobState.CANCELLED:
        return C.USER_CANCELLED
    if end.expired or end.state is JobState.UNSCHEDULABLE or any(t.state is T.UNSCHEDULABLE for t in tasks):
        return C.SCHEDULER_TIMEOUT
    if any(t.oom_killed for t in tasks):
        return C.OOM_KILLED
    if any(t.state is T.FAILED and environment_build_failed(t.reason) for t in tasks):
        return C.ENVIRONMENT_BUILD_FAILED
    if any(t.state is T.FAILED and t.ended_from is T.BUILDING for t in tasks):
        return C.BUILD_FAILURE
    if any(t.state is T.FAILED and t.exit_code not in (None, 0) for t in tasks):
        return C.NONZERO_EXIT
    if end.state is JobState.LOST or any(t.state in TASK_PREEMPTION_OUTCOMES for t in tasks):
        return C.AGENT_TRANSIENT
    return C.UNKNOWN
