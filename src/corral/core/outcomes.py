"""How a job's state follows from its tasks, and whether a finished task gets another attempt.

Pure functions, shared by the worker-report path, the reaper and the handlers, so the rules
of DESIGN.md live in one place.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from corral.core.states import (
    JOB_TERMINAL,
    TASK_PREEMPTION_OUTCOMES,
    TASK_TERMINAL,
    JobState,
    TaskState,
)

T = TaskState


def job_outcome(
    task_states: Iterable[TaskState], *, gang: bool, max_task_failures: int
) -> JobState | None:
    """The terminal state a job is bound for, or None while it is still undecided.

    Independent jobs are judged in this order: more than `max_task_failures` tasks FAILED
    (or KILLED by a time limit) -> FAILED; any UNSCHEDULABLE -> UNSCHEDULABLE; all terminal
    -> SUCCEEDED, or LOST when some ended WORKER_FAILED or PREEMPTED. A gang fails as one:
    any member that ends other than SUCCEEDED decides it.
    """
    counts = Counter(task_states)
    total = sum(counts.values())
    failed = counts[T.FAILED] + counts[T.KILLED]
    lost = sum(counts[s] for s in TASK_PREEMPTION_OUTCOMES)
    if gang:
        if counts[T.UNSCHEDULABLE]:
            return JobState.UNSCHEDULABLE
        if failed:
            return JobState.FAILED
        if lost:
            return JobState.LOST
        return JobState.SUCCEEDED if counts[T.SUCCEEDED] == total else None
    if failed > max_task_failures:
        return JobState.FAILED
    if counts[T.UNSCHEDULABLE]:
        return JobState.UNSCHEDULABLE
    if sum(counts[s] for s in TASK_TERMINAL) < total:
        return None
    return JobState.LOST if lost else JobState.SUCCEEDED


def independent_job_state(task_states: Iterable[TaskState], *, max_task_failures: int) -> JobState:
    """The state of a job whose tasks are independent, read from its tasks alone."""
    states = list(task_states)
    outcome = job_outcome(states, gang=False, max_task_failures=max_task_failures)
    if outcome is not None:
        if all(s in TASK_TERMINAL for s in states):
            return outcome
        return JobState.TERMINATING
    return JobState.PENDING if all(s is T.PENDING for s in states) else JobState.RUNNING


def final_state(outcome: JobState | None, cancelled: bool) -> JobState:
    """What a TERMINATING job becomes once none of its tasks is active."""
    if cancelled:
        return JobState.CANCELLED
    return outcome if outcome in JOB_TERMINAL else JobState.FAILED


def derived_job_state(
    task_states: Iterable[TaskState],
    *,
    gang: bool,
    max_task_failures: int,
    outcome: JobState | None,
    cancelled: bool,
) -> tuple[JobState, JobState | None]:
    """(state, outcome) of an independent job, or of any job bound for an end (a TERMINATING gang).

    Once a job has an outcome (or was cancelled) it only waits for its tasks to stop; later
    task changes, such as siblings being KILLED, never rewrite why it ended.
    """
    states = list(task_states)
    if outcome is None and not cancelled:
        if not gang:
            state = independent_job_state(states, max_task_failures=max_task_failures)
            if state is not JobState.TERMINATING:
                return state, (state if state in JOB_TERMINAL else None)
        outcome = job_outcome(states, gang=gang, max_task_failures=max_task_failures)
    if any(s not in TASK_TERMINAL for s in states):
        return JobState.TERMINATING, outcome
    return final_state(outcome, cancelled), outcome


@dataclass(frozen=True)
class Budget:
    """A task's two retry budgets (failures and preemptions) and what it has used of them."""

    max_retries_failure: int
    max_retries_preemption: int
    failures: int
    preemptions: int


@dataclass(frozen=True)
class RetryDecision:
    retry: bool
    failures: int
    preemptions: int


def after_attempt(ended: TaskState, budget: Budget, *, ever_ran: bool = True, final: bool = False) -> RetryDecision:
    """Charge a finished attempt to its budget and say whether the task runs again.

    FAILED counts against `max_retries_failure`; WORKER_FAILED and PREEMPTED against
    `max_retries_preemption`; an attempt that never left ASSIGNED costs nothing. SUCCEEDED,
    KILLED and UNSCHEDULABLE never retry. A `final` failure (its Python environment could not be
    built: the next attempt would get the same inputs and fail the same way, after another build)
    uses up the failure budget at once, so neither a task nor a gang's drain tries again.
    """
    failures, preemptions = budget.failures, budget.preemptions
    if ended is T.FAILED:
        failures = max(failures + 1, budget.max_retries_failure + 1) if final else failures + 1
        return RetryDecision(failures <= budget.max_retries_failure, failures, preemptions)
    if ended in TASK_PREEMPTION_OUTCOMES:
        if not ever_ran:
            return RetryDecision(True, failures, preemptions)
        preemptions += 1
        return RetryDecision(preemptions <= budget.max_retries_preemption, failures, preemptions)
    return RetryDecision(False, failures, preemptions)
