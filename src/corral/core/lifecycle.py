"""The lifecycle engine's vocabulary and its judgement, as pure code.

A handler returns only who succeeded, failed or was skipped; what each outcome means is
declared once, as data, in its `StatusTransitions`. `judge` turns a result into outcomes:
successes get `success`; failures have their try count raised and get `give_up` past the
limit, else `need_retry`; untouched targets that overstayed the handler's timeout get
`expired`; skipped ones only get a history record. The store applies the outcomes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property

from corral.core.frozen import maker
from corral.core.serving import DeploymentState, ReplicaState
from corral.core.states import JobState, TaskState


class SchedulingResult(StrEnum):
    SUCCESS = "SUCCESS"
    NEED_RETRY = "NEED_RETRY"
    EXPIRED = "EXPIRED"
    GIVE_UP = "GIVE_UP"
    SKIPPED = "SKIPPED"


class Derived(StrEnum):
    """A job state read from the job's tasks instead of declared (independent jobs, final states)."""

    FROM_TASKS = "FROM_TASKS"


DERIVED = Derived.FROM_TASKS


@dataclass(frozen=True)
class TransitionStatus:
    """Where a target goes; None leaves that entity as it is."""

    job: JobState | Derived | None = None
    task: TaskState | None = None
    cancel: bool = False  # the job is marked cancelled: it ends CANCELLED whatever its tasks do
    deployment: DeploymentState | None = None  # serving handlers (corral.engine.serving_handlers)
    replica: ReplicaState | None = None


@dataclass(frozen=True)
class StatusTransitions:
    """What each outcome of a handler means. None: no state change, history only."""

    success: TransitionStatus | None = None
    need_retry: TransitionStatus | None = None
    expired: TransitionStatus | None = None
    give_up: TransitionStatus | None = None

    def for_result(self, result: SchedulingResult) -> TransitionStatus | None:
        return self.meanings[result]

    @cached_property
    def meanings(self) -> dict[SchedulingResult, TransitionStatus | None]:
        """Each result's transition, made once: `judge` looks one up per target (hundreds a placing run)."""
        return {
            SchedulingResult.SUCCESS: self.success,
            SchedulingResult.NEED_RETRY: self.need_retry,
            SchedulingResult.EXPIRED: self.expired,
            SchedulingResult.GIVE_UP: self.give_up,
            SchedulingResult.SKIPPED: None,
        }


class MatchType(StrEnum):
    ALL = "ALL"
    ANY = "ANY"
    NOT_ANY = "NOT_ANY"


def matches(task_states: Iterable[TaskState], check: frozenset[TaskState], match: MatchType) -> bool:
    """The promotion condition: do ALL / ANY / NOT_ANY of the tasks sit in `check`?"""
    hits = [state in check for state in task_states]
    if match is MatchType.ALL:
        return all(hits)
    if match is MatchType.ANY:
        return any(hits)
    return not any(hits)


@dataclass(frozen=True)
class TaskView:
    """One task as a handler sees it."""

    id: int
    index: int
    state: TaskState
    worker_id: str | None = None
    failures: int = 0  # the retry budget it has used
    preemptions: int = 0


@dataclass(frozen=True)
class Target:
    """What a handler acts on: a whole job with all its tasks, or one task of an independent job.

    `state`, `since` and `tries` belong to the job for a whole-job target and to the task
    otherwise, because that is the entity whose lifecycle the handler advances.
    """

    job_id: int
    whole_job: bool
    state: str
    since: float
    tries: int
    tasks: tuple[TaskView, ...]
    timeout: float | None = None  # seconds this target may stay in `state` before it expires

    @property
    def key(self) -> TargetKey:
        return (self.job_id, None if self.whole_job else self.tasks[0].id)


# (job id, None) for a whole job; (job id, task id) for one task of an independent job.
TargetKey = tuple[int, int | None]


@dataclass
class HandlerResult:
    successes: list[TargetKey] = field(default_factory=list)
    failures: list[TargetKey] = field(default_factory=list)
    skipped: list[TargetKey] = field(default_factory=list)
    # A sentence per target for the history record (and, for waiting jobs, the pending reason).
    notes: dict[TargetKey, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    target: Target
    result: SchedulingResult
    transition: TransitionStatus | None
    tries: int
    note: str | None = None


def judge(
    targets: Sequence[Target],
    result: HandlerResult,
    transitions: StatusTransitions,
    *,
    now: float,
    max_tries: int | None,
    is_expired: Callable[[Target, float], bool] | None = None,
) -> list[Outcome]:
    """Decide each target's outcome, in this order: success, failure, expiry, skip.

    A placing run judges every pending task, most of them skipped: each target's key is found once, and the
    outcomes are made by position (`maker`)."""
    expired_check = is_expired or _overstayed
    keyed = [(target.key, target) for target in targets]
    by_key = dict(keyed)
    meanings, notes = transitions.meanings, result.notes
    outcomes: list[Outcome] = []
    add = outcomes.append
    R = SchedulingResult

    for key in result.successes:
        add(_outcome(by_key[key], R.SUCCESS, meanings[R.SUCCESS], 0, notes.get(key)))
    for key in result.failures:
        tries = by_key[key].tries + 1
        res = R.GIVE_UP if max_tries is not None and tries > max_tries else R.NEED_RETRY
        add(_outcome(by_key[key], res, meanings[res], tries, notes.get(key)))
    acted = set(result.successes) | set(result.failures)
    skipped = set(result.skipped)
    expired, skip = (R.EXPIRED, meanings[R.EXPIRED]), (R.SKIPPED, meanings[R.SKIPPED])
    for key, target in keyed:
        if key in acted:
            continue
        if expired_check(target, now):
            add(_outcome(by_key[key], *expired, target.tries, notes.get(key)))
        elif key in skipped:
            add(_outcome(by_key[key], *skip, target.tries, notes.get(key)))
    return outcomes


def _overstayed(target: Target, now: float) -> bool:
    return target.timeout is not None and now - target.since > target.timeout


_outcome = maker(Outcome)  # an outcome per target judged (hundreds a placing run), made by position
