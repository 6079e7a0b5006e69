"""Task, job and worker states, the named sets of them, and the tables of legal moves.

A table is data: every row says from, to, who may make the move (a handler of the engine, or a
reported fact such as a worker's report or a user's cancel) and why. The write path checks every
change against its table, docs/states.md is rendered from the tables, and the event a move
publishes is read from its row, so the code, the documentation and the events cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
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
# A task in one of these states has resources reserved on its worker.
TASK_HOLDS_RESOURCES = frozenset(
    {T.ASSIGNED, T.BUILDING, T.PREPARED, T.STARTING, T.RUNNING, T.PREEMPTING, T.TERMINATING}
)
# States a task passes through before it runs (PromoteToRunning waits until none is left).
TASK_BEFORE_RUNNING = frozenset({T.PENDING, T.ASSIGNED, T.BUILDING, T.PREPARED, T.STARTING})
# States a gang waits on before it is PREPARED (PromoteToPrepared).
TASK_BEFORE_PREPARED = frozenset({T.PENDING, T.ASSIGNED, T.BUILDING})
# Terminal states that count against the preemption budget.
TASK_PREEMPTION_OUTCOMES = frozenset({T.WORKER_FAILED, T.PREEMPTED})

JOB_TERMINAL = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.UNSCHEDULABLE, JobState.LOST}
)
JOB_ACTIVE = frozenset(set(JobState) - JOB_TERMINAL)
# A job's event stream (`/api/v1/events?job=N`) names the job's state here, read once the stream's start was
# fixed: a client that waits for the end reads no job when it is not there yet.
JOB_STATE_HEADER = "X-Corral-Job-State"

J = JobState


class Fact(StrEnum):
    """Who makes the moves no handler of the engine makes: the world outside, and what follows from it."""

    WORKER = "Worker"  # a worker's report about its own task (or its acknowledgement of a preemption)
    REAPER = "Reaper"  # a worker went silent past the loss timeout: what it held is WORKER_FAILED
    CANCEL = "Cancel"  # a user cancelled the job
    RETRY = "Retry"  # an attempt ended with budget left: the task goes back to the queue as a new attempt
    SETTLE = "Settle"  # a job's state read from its tasks; an ending job's unplaced tasks are KILLED
    DRAIN = "DrainGang"  # a member's end, or a preemption, drains a placed gang under a new epoch
    PREEMPT = "PriorityPreemption"  # an independent task stopped to make room for higher-priority work
    SET_ASIDE = "SetAside"  # a handler that keeps failing on one job gives up on it: the job ends FAILED
    UNDEPLOY = "Undeploy"  # a user undeployed a deployment


FACTS: dict[Fact, str] = {
    Fact.WORKER: "a worker's report about its own task",
    Fact.REAPER: "the worker was declared lost (no heartbeat within the loss timeout)",
    Fact.CANCEL: "a user's cancel",
    Fact.RETRY: "an attempt ended with retry budget left",
    Fact.SETTLE: "the job's tasks decided it",
    Fact.DRAIN: "a gang drain: a member ended, or the gang was preempted",
    Fact.PREEMPT: "a priority preemption of an independent task",
    Fact.SET_ASIDE: "a handler failed on the job too many times in a row",
    Fact.UNDEPLOY: "a user's undeploy",
}


@dataclass(frozen=True)
class Move:
    """One row of a table: `by` may move an entity from `source` to `target`, for `why`."""

    source: str
    target: str
    by: str
    why: str
    event: str | None = None  # the event type the move publishes, where it is not "<subject>.state_changed"


class IllegalTransition(ValueError):
    pass


class Transitions:
    """One entity's table of legal moves; `check` is what the write path asks before every change."""

    def __init__(self, entity: str, moves: Iterable[Move]) -> None:
        self.entity = entity
        self.moves: tuple[Move, ...] = tuple(moves)
        self._by: dict[tuple[str, str], dict[str, Move]] = {}
        for move in self.moves:
            setters = self._by.setdefault((str(move.source), str(move.target)), {})
            if move.by in setters:
                raise ValueError(f"{entity}: {move.source} -> {move.target} by {move.by} is declared twice")
            setters[move.by] = move

    def allows(self, source: str, target: str, by: str) -> bool:
        return by in self._by.get((str(source), str(target)), {})

    def check(self, source: str, target: str, by: str) -> Move:
        """The row that lets `by` make this move; IllegalTransition (naming who may) when there is none."""
        setters = self._by.get((str(source), str(target)))
        if not setters:
            raise IllegalTransition(f"a {self.entity} cannot go from {source} to {target}")
        if by not in setters:
            raise IllegalTransition(f"a {self.entity} goes from {source} to {target} only by "
                                    f"{', '.join(sorted(setters))}, not by {by}")
        return setters[by]

    def setters(self) -> set[str]:
        return {move.by for move in self.moves}



def moves(sources, targets, by: str, why: str, event: str | None = None) -> list[Move]:
    """The rows from each of `sources` to each of `targets` (a state, or a set of them) but to itself."""
    return [Move(source, target, str(by), why, event)
            for source in _many(sources) for target in _many(targets) if source != target]


def _many(states) -> list:
    return sorted(states) if isinstance(states, frozenset | set) else [states]


F = Fact
# An attempt that has started on its worker and is not stopping: preempting it means stopping it.
STARTED = frozenset({T.BUILDING, T.PREPARED, T.STARTING, T.RUNNING})
STOPPABLE = frozenset({T.ASSIGNED, *STARTED})  # what TerminateJobs orders to stop
RETRIED = frozenset({T.FAILED, T.WORKER_FAILED, T.PREEMPTED})

# Every task state change in corral is one of these rows.
TASK_TRANSITIONS = Transitions("task", [
    *moves(T.PENDING, T.ASSIGNED, "ScheduleJobs", "placed on a worker, resources reserved"),
    *moves(T.PENDING, T.UNSCHEDULABLE, "ScheduleJobs", "not placed within the scheduling timeout"),
    *moves(T.PENDING, T.KILLED, F.SETTLE, "never placed; its job is ending (cancelled or decided)"),
    *moves(T.PENDING, T.KILLED, "CompleteDrain", "never placed again; its gang's drain failed it"),
    *moves(T.ASSIGNED, T.BUILDING, F.WORKER, "worker started preparing the attempt"),
    *moves(T.ASSIGNED, T.FAILED, F.WORKER, "worker could not prepare the attempt (its files could not be fetched)"),
    *moves(T.BUILDING, T.PREPARED, F.WORKER, "its directory, files and Python environment ready"),
    *moves(T.BUILDING, T.FAILED, F.WORKER, "build failed"),
    *moves(T.PREPARED, T.STARTING, "StartJobs", "start ordered to every member of a prepared gang at once"),
    *moves(T.PREPARED, T.RUNNING, F.WORKER, "an independent task started as soon as it was prepared"),
    *moves(T.PREPARED, T.FAILED, F.WORKER, "an independent task's process could not be started"),
    *moves(T.STARTING, T.RUNNING, F.WORKER, "process started"),
    *moves(T.STARTING, T.FAILED, F.WORKER, "process could not be started"),
    *moves(T.RUNNING, T.SUCCEEDED, F.WORKER, "exit code 0"),
    *moves(T.RUNNING, T.FAILED, F.WORKER, "non-zero exit"),
    *moves(T.RUNNING, T.KILLED, F.WORKER, "time limit reached"),
    *moves(STOPPABLE, T.TERMINATING, "TerminateJobs", "stop ordered: its job is ending"),
    *moves(STARTED, T.PREEMPTING, F.DRAIN, "preemption ordered: its gang drains"),
    *moves(STARTED, T.PREEMPTING, F.PREEMPT, "preemption ordered: room for a higher-priority job"),
    *moves(T.ASSIGNED, T.PENDING, F.DRAIN, "placement undone before it ran: back with its gang"),
    *moves(T.ASSIGNED, T.PENDING, F.PREEMPT, "placement undone before it ran, at no cost"),
    *moves(TASK_HOLDS_RESOURCES, T.WORKER_FAILED, F.REAPER, "worker lost"),
    *moves(T.PREEMPTING, T.PREEMPTED, F.WORKER, "stopped for preemption, acknowledged with the epoch"),
    *moves(T.PREEMPTING, T.PREEMPTED, "ForceDrain", "not acknowledged within the drain timeout: forced"),
    *moves(T.PREEMPTING, T.SUCCEEDED, F.WORKER, "exited 0 before the preemption reached it"),
    *moves(T.TERMINATING, T.KILLED, F.WORKER, "worker confirmed the process is gone"),
    *moves(T.TERMINATING, T.SUCCEEDED, F.WORKER, "exited 0 before the stop reached it"),
    *moves(T.TERMINATING, T.FAILED, F.WORKER, "exited non-zero before the stop reached it"),
    # A retry: a task with budget left goes back to PENDING as a new attempt.
    *moves(RETRIED, T.PENDING, F.RETRY, "an independent task's retry within its budget"),
    *moves(frozenset({T.FAILED, T.WORKER_FAILED}), T.PENDING, F.DRAIN,
           "the member whose end drains its gang, within its budget: back with its gang"),
    *moves(frozenset({T.WORKER_FAILED, T.PREEMPTED}), T.PENDING, "CompleteDrain",
           "its gang's drain complete: back to the queue as a unit"),
])

# A gang in one of these states has been placed: a member's end there starts a drain.
GANG_PLACED = frozenset({J.SCHEDULED, J.PREPARING, J.PREPARED, J.STARTING, J.RUNNING})
JOB_ENDS = frozenset({J.SUCCEEDED, J.FAILED, J.CANCELLED, J.UNSCHEDULABLE, J.LOST})
# The states an independent job reads from its tasks, before its end (corral.core.outcomes).
INDEPENDENT = frozenset({J.PENDING, J.RUNNING, J.TERMINATING})

# Every job state change in corral is one of these rows. A gang moves by its handlers; an independent
# job's state is read from its tasks (Settle), and any job bound for an end ends once its tasks have.
JOB_TRANSITIONS = Transitions("job", [
    *moves(J.PENDING, J.SCHEDULED, "ScheduleJobs", "every member of the gang placed at once"),
    *moves(J.PENDING, J.UNSCHEDULABLE, "ScheduleJobs", "not placed within the scheduling timeout"),
    *moves(J.PENDING, J.TERMINATING, "ScheduleJobs", "a job it depends on ended unsuccessfully: bound for FAILED"),
    *moves(J.SCHEDULED, J.PREPARING, "PrepareJobs", "the gang's build orders released"),
    *moves(J.PREPARING, J.PREPARED, "PromoteToPrepared", "every member built"),
    *moves(J.PREPARED, J.STARTING, "StartJobs", "start ordered to every member at once"),
    *moves(J.STARTING, J.RUNNING, "PromoteToRunning", "every member running"),
    *moves(GANG_PLACED, J.TERMINATING, "DetectTermination", "a member's end decided the gang's outcome"),
    *moves(GANG_PLACED, J.DRAINING, F.DRAIN, "a member ended, or the gang was preempted: it drains"),
    *moves(J.DRAINING, J.PENDING, "CompleteDrain", "drain complete: back to the queue as a unit"),
    *moves(J.DRAINING, J.FAILED, "CompleteDrain", "drain complete: a member used up its budget or ended for good"),
    *moves(JOB_ACTIVE - {J.TERMINATING}, J.TERMINATING, F.CANCEL, "cancelled by a user"),
    *moves(JOB_ACTIVE - {J.TERMINATING}, J.TERMINATING, "CancelLaunched",
           "the job that launched it ended other than SUCCEEDED"),
    *moves(JOB_ACTIVE - {J.TERMINATING}, J.TERMINATING, F.SET_ASIDE, "a handler kept failing on it: bound for FAILED"),
    *moves(J.TERMINATING, JOB_ENDS, "PromoteToTerminated", "no task left active: its outcome, or CANCELLED"),
    *moves(frozenset({J.PENDING, J.RUNNING}), INDEPENDENT | JOB_ENDS, F.SETTLE,
           "read from its tasks (an independent job)"),
    *moves(J.TERMINATING, JOB_ENDS, F.SETTLE, "its tasks have all ended"),
])



