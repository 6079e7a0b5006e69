"""The job handlers of the lifecycle engine (DESIGN.md, "The lifecycle engine"), as data plus pure code.

Each handler names the targets it acts on, declares its transitions, and decides in memory.
A gang job is one target carrying all its tasks; each task of an independent job is a
target of its own, and its job's state is read from its tasks afterwards. The
coordinator fetches targets, calls `execute`, judges the result and writes it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from corral.core.drain import Budgets, Member, drain_timeout, drain_verdict
from corral.core.frozen import maker
from corral.core.lifecycle import (
    DERIVED,
    HandlerResult,
    MatchType,
    Outcome,
    SchedulingResult,
    StatusTransitions,
    Target,
    TargetKey,
    TransitionStatus,
    matches,
)
from corral.core.outcomes import job_outcome
from corral.core.states import (
    GANG_PLACED,
    JOB_ACTIVE,
    JOB_TERMINAL,
    STOPPABLE,
    TASK_BEFORE_PREPARED,
    TASK_BEFORE_RUNNING,
    TASK_TERMINAL,
    JobState,
    TaskState,
)
from corral.engine.effects import Doom, Effect, Place, Preempt, effect_moves
from corral.metrics import DRAIN_SECONDS, DRAINS_COMPLETED, FORCE_DRAINED
from corral.scheduling.fragmentation import RequestMix
from corral.scheduling.placement import Request, Unit, place_over
from corral.scheduling.reasons import DependencyFailed, TimedOut
from corral.scheduling.snapshot import NO_FACTS, ClusterSnapshot, JobPlacement, eligible_since, gate
from corral.store.scheduling_reads import KeptCapacity

J, T = JobState, TaskState
E = TypeVar("E", bound=Effect)
log = logging.getLogger("corral.drain")


@dataclass(frozen=True)
class Launcher:
    """The job whose task submitted a target's job, as the cancel cascade needs it."""

    job_id: int
    state: JobState
    cancelled: bool
    outcome: JobState | None

    def ends_unsuccessfully(self) -> bool:
        """Ended other than SUCCEEDED, or TERMINATING and bound for such an end (a cancel, a failure)."""
        if self.state in JOB_TERMINAL:
            return self.state is not J.SUCCEEDED
        return self.state is J.TERMINATING and (self.cancelled or self.outcome not in (None, J.SUCCEEDED))

    def cause(self) -> str:
        if self.cancelled and self.state is not J.SUCCEEDED:
            return f"cancelled: the job that launched it (job {self.job_id}) was cancelled"
        ending = self.state if self.state in JOB_TERMINAL else self.outcome
        return f"cancelled: the job that launched it (job {self.job_id}) ended {ending}"


@dataclass(frozen=True, slots=True)  # slots: one per target job a pass (core.frozen.maker)
class JobFacts:
    """What handlers need to know of a target's job beyond states."""

    request: Request
    max_task_failures: int
    scheduling_timeout: float | None
    max_retries_failure: int = 0
    max_retries_preemption: int = 100
    grace_period: float = 15.0
    preemption_epoch: int = 0
    launcher: Launcher | None = None  # read only for handlers that declare `launcher_states`


@dataclass
class Snapshot:
    """The world as one handler run sees it, read in one go before it decides."""

    now: float
    jobs: dict[int, JobFacts] = field(default_factory=dict)
    cluster: ClusterSnapshot = field(default_factory=ClusterSnapshot)  # read for handlers that place


@dataclass
class Decision:
    """A handler's result, and what it asks of the world beyond its targets' declared moves."""

    result: HandlerResult
    effects: list[Effect] = field(default_factory=list)

    def of(self, kind: type[E]) -> list[E]:
        return [effect for effect in self.effects if isinstance(effect, kind)]


class Handler:
    name: str = ""
    job_states: frozenset[JobState] = frozenset()  # whole jobs in these states are targets
    gang_only: bool = True  # ...if they are gangs (independent jobs take their state from tasks)
    task_states: frozenset[TaskState] = frozenset()  # tasks of active independent jobs in these states
    launcher_states: frozenset[JobState] = frozenset()  # if set: only jobs launched by a job in one of these
    transitions: StatusTransitions = StatusTransitions()
    max_tries: int | None = None
    effects: tuple[type[Effect], ...] = ()  # the kinds of effect its decisions may carry
    needs_rooms: bool = False
    kept: KeptCapacity | None = None  # where it needs rooms: the capacity index it keeps across passes
    batch_rows: int | None = None  # task rows fetched per run; None: the store's default

    @property
    def effect_moves(self) -> dict[str, frozenset[str]]:
        return effect_moves(self.effects)

    def timeout(self, facts: JobFacts) -> float | None:
        """Seconds a target may stay in its state before it EXPIRES; None: forever."""
        return None

    def execute(self, targets: Sequence[Target], snapshot: Snapshot) -> Decision:
        raise NotImplementedError

    def observe(self, outcomes: Sequence[Outcome], snapshot: Snapshot) -> None:
        """Metrics and log lines for what a run changed, once it is written; most handlers have none."""


class ScheduleJobs(Handler):
    """Places pending work (see scheduling.placement); gives up on what waited past its timeout.

    The timeout counts from when a job could first start (its dependencies met, its begin
    time past), so it is judged here rather than by the generic expiry, and the give-up
    keeps the last reason the job waited for.
    """

    name = "ScheduleJobs"
    job_states = frozenset({J.PENDING})
    task_states = frozenset({T.PENDING})
    transitions = StatusTransitions(
        success=TransitionStatus(job=J.SCHEDULED, task=T.ASSIGNED),
        need_retry=None,
        expired=TransitionStatus(job=J.UNSCHEDULABLE, task=T.UNSCHEDULABLE),
        give_up=TransitionStatus(job=J.UNSCHEDULABLE, task=T.UNSCHEDULABLE),
    )
    max_tries = 0  # one give-up is final
    effects = (Place, Preempt, Doom)
    needs_rooms = True
    batch_rows = 200_000  # every pending task: order by priority or share needs them all in view
    remembered_units = 100_000  # units already counted in the request mixes; the oldest are forgotten past this

    def __init__(self) -> None:
        self.kept = KeptCapacity()
        # Per pool, the requests seen lately, kept across passes: what fragmentation-aware placement measures by.
        self.mixes: dict[str, RequestMix] = defaultdict(RequestMix)
        self.counted: dict[TargetKey, None] = {}  # insertion-ordered: the oldest first

    def execute(self, targets: Sequence[Target], snapshot: Snapshot) -> Decision:
        cluster, now = snapshot.cluster, snapshot.now
        decision = Decision(HandlerResult())
        waits: dict = {}
        units: list[Unit] = []
        since: dict = {}  # the units of jobs with a scheduling timeout: since when each could be placed
        # Placement tells alike tasks apart by identity before it compares: equal requests of many jobs are one object,
        # found by what a request is made of (the row's amounts, the spec's custom slots and device memory).
        requests: dict[tuple[Request, tuple, int], Request] = {}
        last_job, job, held_back, shared, timed = None, NO_FACTS, None, None, False
        for target in targets:
            if target.job_id != last_job:  # a job's targets come in a row: its facts, gate and unit fields found once
                last_job = target.job_id
                job = cluster.jobs.get(last_job, NO_FACTS)
                held_back = gate(job, cluster.dependencies, now)
                shared = None
            if held_back is not None:
                if isinstance(held_back, DependencyFailed):
                    decision.effects.append(Doom(target.job_id, held_back.sentence()))
                else:
                    waits[target.key] = held_back
                continue
            if shared is None:  # one request per job, its units share it
                facts = snapshot.jobs[last_job]
                asked = (facts.request, job.custom, job.gpu_memory)
                request = requests.get(asked)
                if request is None:
                    request = requests[asked] = task_request(job, facts)
                shared = unit_fields(job, request)
                timed = facts.scheduling_timeout is not None
            unit = pending_unit(target, shared, snapshot, eligible_since(job, cluster.dependencies, target.since))
            units.append(unit)
            if timed:  # a key found on the unit, not worked out again from the target
                since[unit.key] = unit.since
        self._count(units)
        placement = place_over(units, cluster.capacity(), policy=cluster.policy, now=now, mixes=self.mixes)
        waits.update(placement.waiting)
        decision.result.successes = list(placement.assignments)
        decision.effects += [_place(key[0], a.task_id, a.worker_id, a.gpu_ids)
                             for key, placed in placement.assignments.items() for a in placed]
        sentences: dict[int, str] = {}  # units blocked alike share one reason: format it once
        for key, reason in waits.items():
            timeout = snapshot.jobs[key[0]].scheduling_timeout
            if key in since and timeout is not None and now - since[key] > timeout:
                decision.result.failures.append(key)
                decision.result.notes[key] = TimedOut(timeout, reason).sentence()
            else:
                decision.result.skipped.append(key)
                if id(reason) not in sentences:
                    sentences[id(reason)] = reason.sentence()
                decision.result.notes[key] = sentences[id(reason)]
        # No one is evicted for a job that gives up now.
        decision.effects += [Preempt(task) for key, victims in placement.victims.items()
                             if key in decision.result.skipped for task in victims]
        return decision

    def observe(self, outcomes: Sequence[Outcome], snapshot: Snapshot) -> None:
        for outcome in outcomes:
            target = outcome.target
            if outcome.result is SchedulingResult.SUCCESS and target.whole_job:
                log.info("gang placed job=%s epoch=%s gang_size=%d", target.job_id,
                         snapshot.jobs[target.job_id].preemption_epoch, len(target.tasks))

    def _count(self, units: list[Unit]) -> None:
        """Add each unit to its pool's request mix the first time a pass sees it."""
        counted = self.counted
        for unit in units:
            if unit.key in counted:
                continue
            counted[unit.key] = None
            if len(counted) > self.remembered_units:
                del counted[next(iter(counted))]
            self.mixes[unit.pool].add(unit.request, unit.constraints, len(unit.task_ids))


NOTHING: frozenset[str] = frozenset()
# An enum member read from its class costs some ten times a plain class's attribute (Python 3.11's enum metaclass has
# a `__getattr__`, which sends every look-up on the class through a slower path): read once here for `pending_unit`.
PENDING = T.PENDING
_place = maker(Place)  # a Place per placed task (some ten thousand a pass), made by position


# The fields every unit of a job shares: request, pool, constraints, spread, priority, project, max_running.
UnitFields = tuple[Request, str, tuple, bool, int, str, int | None]
_unit = maker(Unit)  # a unit per pending task (some ten thousand a pass), made by position


def unit_fields(job: JobPlacement, request: Request) -> UnitFields:
    """The fields every unit of a job shares (`pending_unit`), found once per job."""
    return request, job.pool, job.constraints, job.spread, job.priority, job.project, job.max_running


def pending_unit(target: Target, shared: UnitFields, snapshot: Snapshot, since: float) -> Unit:
    """What placement is offered of a target of ScheduleJobs: its pending tasks, a gang whole; `shared`: its job's
    `unit_fields`, passed by position with the unit's own (a third less than a copy of a dictionary of them)."""
    tasks = target.tasks
    if len(tasks) == 1:  # a task of an independent job, most of a large pass: no generator made for it
        pending = (tasks[0].id,) if tasks[0].state is PENDING else ()
    else:
        pending = tuple(task.id for task in tasks if task.state is PENDING)
    failed_on = snapshot.cluster.avoid
    avoid = frozenset().union(*(failed_on.get(t, ()) for t in pending)) if failed_on else NOTHING
    request, pool, constraints, spread, priority, project, max_running = shared
    return _unit(target.key, pending, request, pool, constraints, spread, priority, project, since, avoid, max_running)


def task_request(job: JobPlacement, facts: JobFacts) -> Request:
    """What each task of a job reserves: its row's amounts, its spec's custom slots and device memory."""
    return Request(facts.request.cpu, facts.request.memory, facts.request.gpu, job.custom, job.gpu_memory)


class PrepareJobs(Handler):
    """Releases the build orders of a placed gang (independent tasks build as soon as ASSIGNED)."""

    name = "PrepareJobs"
    job_states = frozenset({J.SCHEDULED})
    transitions = StatusTransitions(success=TransitionStatus(job=J.PREPARING))

    def execute(self, targets: Sequence[Target], snapshot: Snapshot) -> Decision:
        return Decision(HandlerResult(successes=[t.key for t in targets]))


class StartJobs(Handler):
    """Orders the start of a PREPARED gang, every member at once: the barrier a gang's members meet at.

    An independent task needs no such order: its worker starts it as soon as it is prepared.
    """

    name = "StartJobs"
    job_states = frozenset({J.PREPARED})
    transitions = StatusTransitions(success=TransitionStatus(job=J.STARTING, task=T.STARTING))

    def execute(self, targets: Sequence[Target], snapshot: Snapshot) -> Decision:
        return Decision(HandlerResult(successes=[t.key for t in targets]))


class TerminateJobs(Handler):
    """Orders every placed task of a TERMINATING job to stop; the worker confirms each exit.

    It declares no expiry to a terminal state: a job ends only through
    PromoteToTerminated, once each task's exit is confirmed by its worker or its worker is
    declared lost, so a job never reads as over while a process of it may still run, and a
    dead worker bounds the wait by the loss timeout.
    """

    name = "TerminateJobs"
    job_states = frozenset({J.TERMINATING})
    gang_only = False
    transitions = StatusTransitions(success=TransitionStatus(task=T.TERMINATING))
    stoppable = STOPPABLE

    def execute(self, targets: Sequence[Target], snapshot: Snapshot) -> Decision:
        return Decision(HandlerResult(
            successes=[t.key for t in targets if any(task.state in self.stoppable for task in t.tasks)]
        ))


class CancelLaunched(Handler):
    """The cancel cascade: a launcher that ends other than SUCCEEDED cancels the jobs it launched.

    Runs before TerminateJobs, so a cancelled child's tasks get their stop in the same pass;
    the child, now TERMINATING and cancelled, is a launcher bound for CANCELLED on the next
    pass, which is how the cascade reaches grandchildren.
    """

    name = "CancelLaunched"
    job_states = frozenset(JOB_ACTIVE - {J.TERMINATING})
    gang_only = False
    launcher_states = frozenset(JOB_TERMINAL - {J.SUCCEEDED} | {J.TERMINATING})
    transitions = StatusTransitions(success=TransitionStatus(job=J.TERMINATING, cancel=True))

    def execute(self, targets: Sequence[Target], snapshot: Snapshot) -> Decision:
        result = HandlerResult()
        for target in targets:
            launcher = snapshot.jobs[target.job_id].launcher
            if launcher is not None and launcher.ends_unsuccessfully():
                result.successes.append(target.key)
                result.notes[target.key] = launcher.cause()
        return Decision(result)


class PromotionHandler(Handler):
    """Moves a gang job on when ALL / ANY / NOT_ANY of its tasks sit in `check`."""

    check: frozenset[TaskState] = frozenset()
    match: MatchType = MatchType.NOT_ANY

    def execute(self, targets: Sequence[Target], snapshot: Snapshot) -> Decision:
        return Decision(HandlerResult(
            successes=[t.key for t in targets if matches((x.state for x in t.tasks), self.check, self.match)]
        ))


class PromoteToPrepared(PromotionHandler):
    name = "PromoteToPrepared"
    job_states = frozenset({J.PREPARING})
    check = TASK_BEFORE_PREPARED
    match = MatchType.NOT_ANY
    transitions = StatusTransitions(success=TransitionStatus(job=J.PREPARED))


class PromoteToRunning(PromotionHandler):
    name = "PromoteToRunning"
    job_states = frozenset({J.STARTING})
    check = TASK_BEFORE_RUNNING
    match = MatchType.NOT_ANY
    transitions = StatusTransitions(success=TransitionStatus(job=J.RUNNING))


class DetectTermination(PromotionHandler):
    """A gang whose members have started ending: terminate it once its outcome is decided.

    Members that finish SUCCEEDED while others run are normal (ranks end at slightly
    different times), so ANY terminal task only triggers when `job_outcome` has a verdict.
    """

    name = "DetectTermination"
    job_states = GANG_PLACED
    check = TASK_TERMINAL
    match = MatchType.ANY
    transitions = StatusTransitions(success=TransitionStatus(job=J.TERMINATING))

    def execute(self, targets: Sequence[Target], snapshot: Snapshot) -> Decision:
        triggered = super().execute(targets, snapshot).result.successes
        by_key = {t.key: t for t in targets}
        decided = [
            key for key in triggered
            if job_outcome((task.state for task in by_key[key].tasks), gang=True, max_task_failures=0)
        ]
        return Decision(HandlerResult(successes=decided))


class PromoteToTerminated(PromotionHandler):
    name = "PromoteToTerminated"
    job_states = frozenset({J.TERMINATING})
    gang_only = False
    check = frozenset(set(TaskState) - TASK_TERMINAL)
    match = MatchType.NOT_ANY
    transitions = StatusTransitions(success=TransitionStatus(job=DERIVED))


class ForceDrain(Handler):
    """A preempted task that has not acknowledged within the drain timeout (grace + 30 s) is forced
    to PREEMPTED, so a dead or silent worker never blocks a drain. Runs before CompleteDrain, so a
    forced task completes its gang's drain in the same pass."""

    name = "ForceDrain"
    job_states = frozenset({J.DRAINING})
    task_states = frozenset({T.PREEMPTING})
    transitions = StatusTransitions(expired=TransitionStatus(task=T.PREEMPTED))

    def timeout(self, facts: JobFacts) -> float | None:
        return drain_timeout(facts.grace_period)

    def execute(self, targets: Sequence[Target], snapshot: Snapshot) -> Decision:
        return Decision(HandlerResult(notes={
            t.key: f"not acknowledged within the drain timeout "
                   f"({drain_timeout(snapshot.jobs[t.job_id].grace_period):g}s): forced"
            for t in targets
        }))

    def observe(self, outcomes: Sequence[Outcome], snapshot: Snapshot) -> None:
        for outcome in outcomes:
            if outcome.result is not SchedulingResult.EXPIRED:
                continue
            target = outcome.target
            forced = [task for task in target.tasks if task.state is T.PREEMPTING]
            FORCE_DRAINED.inc(len(forced))
            for task in forced:
                log.warning("task preempted (forced past the drain timeout) job=%s task=%s index=%s epoch=%s",
                            target.job_id, task.id, task.index, snapshot.jobs[target.job_id].preemption_epoch)


class CompleteDrain(Handler):
    """A DRAINING gang with no task left PREEMPTING is decided in one step (`drain_verdict`): back to
    PENDING as a unit (success), or FAILED (a failure, given up at once), its unplaced tasks KILLED."""

    name = "CompleteDrain"
    job_states = frozenset({J.DRAINING})
    transitions = StatusTransitions(
        success=TransitionStatus(job=J.PENDING, task=T.PENDING),
        give_up=TransitionStatus(job=J.FAILED, task=T.KILLED),
    )
    max_tries = 0

    def execute(self, targets: Sequence[Target], snapshot: Snapshot) -> Decision:
        result = HandlerResult()
        for target in targets:
            if any(task.state is T.PREEMPTING for task in target.tasks):
                continue
            facts = snapshot.jobs[target.job_id]
            verdict = drain_verdict(
                (Member(t.index, t.state, t.failures, t.preemptions) for t in target.tasks),
                Budgets(facts.max_retries_failure, facts.max_retries_preemption))
            (result.successes if verdict.requeue else result.failures).append(target.key)
            result.notes[target.key] = f"drain of epoch {facts.preemption_epoch} complete: {verdict.reason}"
        return Decision(result)

    def observe(self, outcomes: Sequence[Outcome], snapshot: Snapshot) -> None:
        for outcome in outcomes:
            if outcome.result not in (SchedulingResult.SUCCESS, SchedulingResult.GIVE_UP):
                continue
            target, verdict = outcome.target, "requeued" if outcome.result is SchedulingResult.SUCCESS else "failed"
            seconds = max(0.0, snapshot.now - target.since)
            DRAINS_COMPLETED.labels(verdict).inc()
            DRAIN_SECONDS.observe(seconds)
            log.info("gang drain completed job=%s epoch=%s outcome=%s drain_seconds=%.3f note=%r", target.job_id,
                     snapshot.jobs[target.job_id].preemption_epoch, verdict, seconds, outcome.note)


# The order a pass runs them in: each one's successes are the next one's targets.
JOB_HANDLERS: tuple[Handler, ...] = (
    ScheduleJobs(),
    PrepareJobs(),
    PromoteToPrepared(),
    StartJobs(),
    PromoteToRunning(),
    DetectTermination(),
    CancelLaunched(),
    TerminateJobs(),
    PromoteToTerminated(),
    ForceDrain(),
    CompleteDrain(),
)
