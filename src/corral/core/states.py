"""Task, job and worker states, the named sets of them, and the legal task transitions.

The transition table is data: the code validates every change against it, the tests walk
every row, and `corral states` prints it, so the three cannot drift apart.
"""

from __future__ import annotations

from enum import StrEnum


class TaskState(StrEnum):
    PENDING = "PENDING"
    ASSIGNED = "ASSIGNED"
    BUILDING = "BUILDING"
    PREPARED = "PREPARED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    PREEMPTING = "PREEMPTING"
    TERMINATING = "TERMINATING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    KILLED = "KILLED"
    WORKER_FAILED = "WORKER_FAILED"
    PREEMPTED = "PREEMPTED"
    UNSCHEDULABLE = "UNSCHEDULABLE"


class JobState(StrEnum):
    PENDING = "PENDING"
    SCHEDULED = "SCHEDULED"
    PREPARING = "PREPARING"
    PREPARED = "PREPARED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    DRAINING = "DRAINING"
    TERMINATING = "TERMINATING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    UNSCHEDULABLE = "UNSCHEDULABLE"
    LOST = "LOST"


class WorkerState(StrEnum):
    ALIVE = "ALIVE"
    LOST = "LOST"


T = TaskState

TASK_TERMINAL = frozenset({T.SUCCEEDED, T.FAILED, T.KILLED, T.WORKER_FAILED, T.PREEMPTED, T.UNSCHEDULABLE})
TASK_ACTIVE = frozenset(set(TaskState) - TASK_TERMINAL)
# A task in one of these states has resources reserved on its worker.
TASK_HOLDS_RESOURCES = frozenset(
    {T.ASSIGNED, T.BUILDING, T.PREPARED, T.STARTING, T.RUNNING, T.PREEMPTING, T.TERMINATING}
)
# States in which a process of the task may exist on the worker.
TASK_ON_WORKER = frozenset({T.BUILDING, T.PREPARED, T.STARTING, T.RUNNING, T.PREEMPTING, T.TERMINATING})
# States a task passes through before it runs (PromoteToRunning waits until none is left).
TASK_BEFORE_RUNNING = frozenset({T.PENDING, T.ASSIGNED, T.BUILDING, T.PREPARED, T.STARTING})
# States a gang waits on before it is PREPARED (PromoteToPrepared).
TASK_BEFORE_PREPARED = frozenset({T.PENDING, T.ASSIGNED, T.BUILDING})
# Terminal states that count against the preemption budget, and against the failure budget.
TASK_PREEMPTION_OUTCOMES = frozenset({T.WORKER_FAILED, T.PREEMPTED})
TASK_FAILURE_OUTCOMES = frozenset({T.FAILED})

JOB_TERMINAL = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.UNSCHEDULABLE, JobState.LOST}
)
JOB_ACTIVE = frozenset(set(JobState) - JOB_TERMINAL)

# Who may make each move: the scheduler/coordinator ("controller"), the worker's report, or both.
CONTROLLER = "controller"
WORKER = "worker"

# (from, to) -> who sets it, and why. Every task state change in corral is one of these rows.
TASK_TRANSITIONS: dict[tuple[TaskState, TaskState], tuple[str, str]] = {
    (T.PENDING, T.ASSIGNED): (CONTROLLER, "placed on a worker, resources reserved"),
    (T.PENDING, T.UNSCHEDULABLE): (CONTROLLER, "not placed within the scheduling timeout"),
    (T.PENDING, T.KILLED): (CONTROLLER, "cancelled before it was placed"),
    (T.ASSIGNED, T.BUILDING): (WORKER, "worker started preparing the attempt"),
    (T.ASSIGNED, T.PENDING): (CONTROLLER, "placement undone before the worker acted (re-schedule)"),
    (T.ASSIGNED, T.TERMINATING): (CONTROLLER, "stop ordered before the worker acted"),
    (T.ASSIGNED, T.WORKER_FAILED): (CONTROLLER, "worker lost"),
    (T.BUILDING, T.PREPARED): (WORKER, "its directory, files and Python environment ready"),
    (T.BUILDING, T.FAILED): (WORKER, "build failed"),
    (T.BUILDING, T.TERMINATING): (CONTROLLER, "stop ordered"),
    (T.BUILDING, T.PREEMPTING): (CONTROLLER, "preemption ordered"),
    (T.BUILDING, T.WORKER_FAILED): (CONTROLLER, "worker lost"),
    (T.PREPARED, T.STARTING): (CONTROLLER, "start ordered"),
    (T.PREPARED, T.PENDING): (CONTROLLER, "start expired; re-schedule"),
    (T.PREPARED, T.TERMINATING): (CONTROLLER, "stop ordered"),
    (T.PREPARED, T.PREEMPTING): (CONTROLLER, "preemption ordered"),
    (T.PREPARED, T.WORKER_FAILED): (CONTROLLER, "worker lost"),
    (T.STARTING, T.RUNNING): (WORKER, "process started"),
    (T.STARTING, T.FAILED): (WORKER, "process could not be started"),
    (T.STARTING, T.TERMINATING): (CONTROLLER, "stop ordered"),
    (T.STARTING, T.PREEMPTING): (CONTROLLER, "preemption ordered"),
    (T.STARTING, T.WORKER_FAILED): (CONTROLLER, "worker lost"),
    (T.RUNNING, T.SUCCEEDED): (WORKER, "exit code 0"),
    (T.RUNNING, T.FAILED): (WORKER, "non-zero exit"),
    (T.RUNNING, T.KILLED): (WORKER, "time limit reached"),
    (T.RUNNING, T.TERMINATING): (CONTROLLER, "stop ordered"),
    (T.RUNNING, T.PREEMPTING): (CONTROLLER, "preemption ordered"),
    (T.RUNNING, T.WORKER_FAILED): (CONTROLLER, "worker lost"),
    (T.PREEMPTING, T.PREEMPTED): (WORKER, "stopped for preemption, acknowledged with the epoch "
                                          "(forced by the controller past the drain timeout)"),
    (T.PREEMPTING, T.SUCCEEDED): (WORKER, "exited 0 before the preemption reached it"),
    (T.PREEMPTING, T.WORKER_FAILED): (CONTROLLER, "worker lost"),
    (T.TERMINATING, T.KILLED): (WORKER, "worker confirmed the process is gone"),
    (T.TERMINATING, T.SUCCEEDED): (WORKER, "exited 0 before the stop reached it"),
    (T.TERMINATING, T.FAILED): (WORKER, "exited non-zero before the stop reached it"),
    (T.TERMINATING, T.WORKER_FAILED): (CONTROLLER, "worker lost"),
    # A retry: a task with budget left goes back to PENDING as a new attempt.
    (T.FAILED, T.PENDING): (CONTROLLER, "retry within max_retries_failure"),
    (T.WORKER_FAILED, T.PENDING): (CONTROLLER, "retry within max_retries_preemption"),
    (T.PREEMPTED, T.PENDING): (CONTROLLER, "retry within max_retries_preemption"),
}


class IllegalTransition(ValueError):
    pass


def check_task_transition(current: TaskState, new: TaskState) -> None:
    """Raise IllegalTransition unless the table has the row `current -> new`."""
    if (current, new) not in TASK_TRANSITIONS:
        raise IllegalTransition(f"task cannot go from {current} to {new}")


def is_legal(current: TaskState, new: TaskState) -> bool:
    return (current, new) in TASK_TRANSITIONS
