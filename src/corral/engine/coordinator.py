"""The coordinator: runs a handler and applies what it decided, in one transaction and one flush per run.

It is generic: it knows nothing of any one handler beyond its declared targets, transitions and
effects. The moves an outcome makes are the handler's declared transitions, checked against the
tables; what it asks beyond them are typed effects, each carried out by the applier registered
for its type. Reads are one query for targets (and one for worker room when placing), writes go
through one ChangeSet, and job states are settled from their tasks before the flush.

Each job's changes are worked out apart and joined only if they all could be: a job the handler
raises about, or whose changes the tables refuse, is set aside (target_errors) with the cause on
record, and the run goes on for the others. Under CORRAL_STRICT_MOVES=1 (the test suite) a move
the tables refuse raises instead, so a test sees it.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from corral.core.collector import paused
from corral.core.frozen import maker
from corral.core.lifecycle import DERIVED, Outcome, SchedulingResult, Target, TaskView, judge
from corral.core.outcomes import derived_job_state
from corral.core.states import (
    JOB_TERMINAL,
    TASK_TERMINAL,
    TASK_TRANSITIONS,
    Fact,
    IllegalTransition,
    JobState,
    TaskState,
)
from corral.engine.attempts import end_attempt, requeue
from corral.engine.effects import Doom, Effect, Place, Preempt
from corral.engine.handlers import Decision, Handler, HandlerResult, JobFacts, Launcher, Snapshot
from corral.engine.priority_preemption import preempt_victims
from corral.engine.settle import settle_jobs
from corral.engine.target_errors import TargetError, TargetErrors, decide_apart
from corral.metrics import PLACEMENTS, SCHEDULING_SECONDS, TRANSITIONS
from corral.scheduling.placement import Request
from corral.store.changes import ChangeSet, TaskRow
from corral.store.reads import (
    BATCH_ROWS,
    JOB_STATES,
    T_ATTEMPT,
    T_CPU,
    T_FAILURES,
    T_GPU,
    T_ID,
    T_INDEX,
    T_JOB_ID,
    T_MEMORY,
    T_PREEMPTIONS,
    T_SINCE,
    T_STATE,
    T_TRIES,
    T_WORKER_ID,
    TASK_STATES,
    TASK_TARGET_JOB_STATES,
    TargetJob,
    target_rows,
)
from corral.store.scheduling_reads import KeptCapacity, capacity_fence, read_cluster
from corral.store.store import Store

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

log = logging.getLogger("corral.coordinator")

STRICT = os.environ.get("CORRAL_STRICT_MOVES") == "1"


@dataclass
class RunReport:
    """What a handler run changed, so the loop knows whom to wake."""

    changed: bool = False
    workers: set[str] = field(default_factory=set)
    outcomes: list[Outcome] = field(default_factory=list)  # all but the skipped ones (_acted_on)
    after: Any = None  # what `then` read at the end of a run that changed something
    # A placing run (`needs_rooms`) over all its targets whose changes were placements alone (and waits noted): they
    # take room and free none, and end, doom, requeue or add no job, so that another run of it at once, with nothing
    # committed between, finds nothing it could not place now. A Doom, a preemption, an expiry or give-up, a job set
    # aside, or targets cut off at the batch's limit leave it False: each can give the next run something to place
    # (a Doom or an expiry ends a job, which can free its dependents).
    only_placed: bool = False


@dataclass(slots=True)  # one per target job a pass
class _Job:
    state: JobState
    gang: bool
    facts: JobFacts
    pending_reason: str | None
    outcome: str | None
    cancelled: bool
    waited: bool = False  # its wait is on record in this run

    # What `end_attempt` reads of a job.
    @property
    def job_state(self) -> JobState:
        return self.state

    @property
    def max_retries_failure(self) -> int:
        return self.facts.max_retries_failure

    @property
    def max_retries_preemption(self) -> int:
        return self.facts.max_retries_preemption


async def run_handler(store: Store, handler: Handler, now: float, errors: TargetErrors | None = None,
                      then: Callable[[AsyncConnection], Awaitable[Any]] | None = None) -> RunReport:
    """One run. A job the handler raises about is left out and reported to `errors` (kept across runs by the
    engine: that is how a streak is seen); the run goes on for the others and commits. A run that changed something
    ends its transaction with `then`'s read (its report's `after`): what is there once it commits, without a
    transaction of its own."""
    errors = errors or TargetErrors()
    # A placing run reads and decides over some hundred thousand short-lived objects (every pending task's row,
    # target and unit): the collector's full collections would walk them and every long-lived object besides.
    with paused() if handler.needs_rooms else nullcontext():
        return await _run(store, handler, now, errors, then)


async def _run(store: Store, handler: Handler, now: float, errors: TargetErrors,
               then: Callable[[AsyncConnection], Awaitable[Any]] | None) -> RunReport:
    async with store.write(handler.name) as connection:
        rows = await target_rows(connection, handler.job_states, handler.gang_only, handler.task_states,
                                 handler.launcher_states, handler.batch_rows or BATCH_ROWS)
        if not rows:
            errors.report(handler.name, {})
            return RunReport()
        complete = sum(len(members) for _, members in rows) < (handler.batch_rows or BATCH_ROWS)
        targets, job_info, task_rows = _targets(rows, handler)
        read_states = {job_id: info.state for job_id, info in job_info.items()}
        snapshot = Snapshot(now, {job_id: info.facts for job_id, info in job_info.items()})
        started = time.perf_counter()
        failed: dict[int, BaseException | str] = {}
        if handler.needs_rooms:
            snapshot.cluster = await read_cluster(connection, handler.kept, job_info.keys(), _retried(rows))
            failed.update((job_id, cause) for job_id, cause in snapshot.cluster.unreadable.items()
                          if job_id in job_info)
        decision, targets = decide_apart(lambda some: handler.execute(some, snapshot),
                                         [t for t in targets if t.job_id not in failed], lambda t: t.job_id, failed)
        if handler.needs_rooms:
            SCHEDULING_SECONDS.observe(time.perf_counter() - started)
        undeclared = [e for e in decision.effects if not isinstance(e, handler.effects)]
        if undeclared:
            raise TypeError(f"{handler.name} does not declare the effects {undeclared}")
        outcomes, waiting = _judged(targets, decision.result, handler, now)
        changes = _work_out(outcomes, decision, handler, job_info, task_rows, failed, now, waiting)
        outcomes = [outcome for outcome in outcomes if outcome.target.job_id not in failed]
        for job_id, error in errors.report(handler.name, failed).items():
            _set_aside(job_id, error, handler, changes, read_states[job_id])
        for kind, apply in RUN_APPLIERS.items():
            await apply(connection, changes, decision.of(kind))
        if changes.empty:
            return RunReport(outcomes=_acted_on(outcomes))
        # Workers locked before jobs, as reports do; the jobs' placement facts are those kept by the cluster read.
        async with capacity_fence(connection, changes.placed_workers, handler.kept):
            await settle_jobs(connection, changes, changes.touched_jobs, handler.name)
            await changes.flush(connection)
        handler.observe(outcomes, snapshot)
        # A job's move alone can change its placed tasks' orders (a gang's builds are released by PrepareJobs): their
        # workers are woken with those whose tasks moved.
        held = {task.worker_id for target in targets if target.job_id in changes.touched_jobs
                for task in target.tasks if task.worker_id}
        after = await then(connection) if then is not None and changes.moved else None
        acted = _acted_on(outcomes)
        only_placed = (handler.needs_rooms and complete and not failed
                       and all(type(effect) is Place for effect in decision.effects)
                       and all(outcome.result is SchedulingResult.SUCCESS for outcome in acted))
        return RunReport(changes.moved, changes.touched_workers | held, acted, after, only_placed)


def _judged(targets: list[Target], result: HandlerResult, handler: Handler,
            now: float) -> tuple[list[Outcome], list[tuple[int, str | None]]]:
    """`judge`'s outcomes but for the skipped ones, and those as (job id, note) in the targets' order: what a skipped
    outcome does is count and, the first of its job's, note the job's wait, so a placing run's hundreds of waiting
    tasks need no outcome each. Only where no target can expire (no timeout), which would interleave EXPIRED
    outcomes among the skipped ones; otherwise every outcome is judged as before."""
    if any(target.timeout is not None for target in targets):
        return judge(targets, result, handler.transitions, now=now, max_tries=handler.max_tries), []
    acted = set(result.successes)
    acted.update(result.failures)
    skipped, notes = set(result.skipped), result.notes
    acting, waiting = [], []
    for target in targets:
        key = target.key
        if key in acted:
            acting.append(target)
        elif key in skipped:
            waiting.append((target.job_id, notes.get(key)))
    return judge(acting, result, handler.transitions, now=now, max_tries=handler.max_tries), waiting


def _acted_on(outcomes: list[Outcome]) -> list[Outcome]:
    """The outcomes a run's report keeps: not the skipped ones, most of a placing run's (each pending task that found
    no room), which change nothing. Kept past the run, they were alive when its pause of the collector ended, so its
    next collection walked them and moved them to the older generations, whose growth set off full collections (a
    placing run of 436 pending: a full collection every hundred runs or so, about a fifth of the runs' CPU)."""
    return [outcome for outcome in outcomes if outcome.result is not SchedulingResult.SKIPPED]


async def pending_work(connection: AsyncConnection, handler: Handler, now: float,
                       kept: KeptCapacity) -> tuple[list[Target], Snapshot, dict[int, JobState]]:
    """A placing handler's targets, and the cluster over an index `kept` across calls, as its run would see them,
    without running it: what the start estimates simulate ahead from. Also each target job's state."""
    rows = await target_rows(connection, handler.job_states, handler.gang_only, handler.task_states,
                             handler.launcher_states, handler.batch_rows or BATCH_ROWS)
    targets, job_info, _ = _targets(rows, handler)
    snapshot = Snapshot(now, {job_id: info.facts for job_id, info in job_info.items()})
    snapshot.cluster = await read_cluster(connection, kept, job_info.keys(), _retried(rows))
    return targets, snapshot, {job_id: info.state for job_id, info in job_info.items()}


def may_have_targets(handler: Handler, present: set[tuple[str, bool, str, bool]]) -> bool:
    """Whether target_rows could find any target of `handler` among these (job state, gang, task state, launched by
    a job) rows (store.reads.present_states): when not, its run would read nothing and change nothing, and is left
    out. A handler of launched jobs only (launcher_states) has none where no job was launched by another."""
    for job_state, gang, task_state, launched in present:
        if handler.launcher_states and not launched:
            continue
        if job_state in handler.job_states and (gang or not handler.gang_only):
            return True
        if (handler.task_states and not gang and job_state in TASK_TARGET_JOB_STATES
                and task_state in handler.task_states):
            return True
    return False


def _work_out(outcomes: list[Outcome], decision: Decision, handler: Handler, job_info: dict[int, _Job],
              task_rows: dict[int, TaskRow], failed: dict, now: float,
              waiting: list[tuple[int, str | None]] = ()) -> ChangeSet:
    """The run's changes, worked out job by job: a job whose changes raise goes to `failed` with none of them.

    A job's effects come first (a placement's worker is on its move's record), then its outcomes' moves, then the
    waits of `waiting` (`_judged`'s skipped targets, in order), each as its skipped outcome would have.
    """
    per_job: dict[int, ChangeSet] = {}
    moves: Counter[SchedulingResult] = Counter()  # counted here, added to the metric once per result
    run = _Run(handler, job_info, task_rows)
    effects = [e for e in decision.effects if type(e) in JOB_APPLIERS]
    work = [(e.job_id, e) for e in effects] + [(o.target.job_id, o) for o in outcomes] + list(waiting)
    for job_id, item in work:
        if job_id in failed:
            continue
        changes = per_job.get(job_id)
        if changes is None:  # made once per job, not once per item (a job of 10 placed tasks has 20)
            changes = per_job[job_id] = ChangeSet(now)
        try:
            if isinstance(item, Effect):
                JOB_APPLIERS[type(item)](item, changes, run)
            elif isinstance(item, Outcome):
                _apply(item, handler, changes, job_info, task_rows)
                moves[item.result] += 1
            else:  # a waiting task's note, as its skipped outcome would have been applied
                if item and not job_info[job_id].waited:
                    _wait(job_id, item, job_info[job_id], handler, changes)
                moves[SchedulingResult.SKIPPED] += 1
        except Exception as error:
            if STRICT and isinstance(error, IllegalTransition):
                raise
            failed[job_id] = error
    for result, count in moves.items():
        TRANSITIONS.labels(handler.name, result).inc(count)
    changes = ChangeSet(now)
    for job_id, job_changes in per_job.items():
        if job_id not in failed:
            changes.absorb(job_changes)
    return changes


def _set_aside(job_id: int, error: TargetError, handler: Handler, changes: ChangeSet, state: JobState) -> None:
    """Record the first failure of a streak on the job; end the job FAILED once the handler gives up on it."""
    if error.give_up and state not in JOB_TERMINAL and state is not JobState.TERMINATING:
        changes.job(job_id, state, JobState.TERMINATING, handler=handler.name, by=Fact.SET_ASIDE,
                    result=SchedulingResult.GIVE_UP,
                    message=error.note(handler.name), outcome=str(JobState.FAILED), pending_reason=None)
    else:
        changes.wait(job_id, handler.name, state, error.note(handler.name), repeated=not error.first)


class _TaskRows(dict[int, TaskRow]):
    """The run's task rows by id, each made on first use: most targets of a run are skipped (a queue that waits
    for room), and only a task the run moves needs its row; once made, a row is the one every later use changes.
    The rows read are found by id once one is first wanted (a run that moves nothing never looks)."""

    def __init__(self, found: list[tuple[TargetJob, list]]) -> None:
        super().__init__()
        self.found = found
        self.read: dict[int, Any] | None = None

    def __missing__(self, task_id: int) -> TaskRow:
        if self.read is None:
            self.read = {row[T_ID]: row for _, rows in self.found for row in rows}
        r = self.read[task_id]
        row = self[task_id] = TaskRow(r[T_ID], r[T_JOB_ID], r[T_INDEX], TASK_STATES[r[T_STATE]], r[T_ATTEMPT],
                                      r[T_WORKER_ID], r[T_FAILURES], r[T_PREEMPTIONS])
        return row


_task_view, _target, _job_facts = maker(TaskView), maker(Target), maker(JobFacts)


def _targets(found: list[tuple[TargetJob, list]],
             handler: Handler) -> tuple[list[Target], dict[int, _Job], dict[int, TaskRow]]:
    """The targets of `target_rows`' jobs and task rows, each job's facts, and the task rows by id.

    A pass makes one target (and a view of its task) per pending task, so they are made without the frozen
    dataclasses' constructors (`maker`), of rows read by position; a job's facts are made once, and the jobs asking
    alike share one request."""
    targets: list[Target] = []
    append = targets.append
    job_info: dict[int, _Job] = {}
    requests: dict[tuple[float, int, float], Request] = {}
    states, task_view, make_target = TASK_STATES, _task_view, _target
    with_launcher = bool(handler.launcher_states)
    for job, rows in found:
        job_id, first = job.job_id, rows[0]
        amounts = (first[T_CPU], first[T_MEMORY], first[T_GPU])
        request = requests.get(amounts)
        if request is None:
            request = requests[amounts] = Request(*amounts)
        facts = _job_facts(request, job.max_task_failures, job.scheduling_timeout, job.max_retries_failure,
                           job.max_retries_preemption, job.grace_period, job.preemption_epoch,
                           _launcher(job) if with_launcher else None)
        job_info[job_id] = _Job(JOB_STATES[job.job_state], job.gang, facts, job.pending_reason, job.outcome,
                                job.cancelled)
        timeout = handler.timeout(facts)
        if job.job_state in handler.job_states and (job.gang or not handler.gang_only):
            views = tuple(task_view(r[T_ID], r[T_INDEX], states[r[T_STATE]], r[T_WORKER_ID], r[T_FAILURES],
                                    r[T_PREEMPTIONS]) for r in rows)
            append(make_target(job_id, True, job.job_state, job.job_since, job.job_tries, views, timeout))
            continue
        for r in rows:
            append(make_target(job_id, False, r[T_STATE], r[T_SINCE], r[T_TRIES], (task_view(
                r[T_ID], r[T_INDEX], states[r[T_STATE]], r[T_WORKER_ID], r[T_FAILURES], r[T_PREEMPTIONS]),), timeout))
    return targets, job_info, _TaskRows(found)


def _retried(found: list[tuple[TargetJob, list]]) -> list[int]:
    """The pending tasks read past their first attempt (a task's attempt counts up as it goes back to the queue): the
    only ones whose earlier attempts may have failed on a worker (read_cluster's `retried`)."""
    pending = str(TaskState.PENDING)
    return [r[T_ID] for _, rows in found for r in rows if r[T_ATTEMPT] and r[T_STATE] == pending]


def _launcher(row) -> Launcher:
    outcome = JobState(row.launcher_outcome) if row.launcher_outcome else None
    return Launcher(row.launcher_id, JobState(row.launcher_state), bool(row.launcher_cancelled), outcome)


def _apply(outcome: Outcome, handler: Handler, changes: ChangeSet, job_info: dict[int, _Job],
           task_rows: dict[int, TaskRow]) -> None:
    target, transition = outcome.target, outcome.transition
    job = job_info[target.job_id]
    if outcome.result is SchedulingResult.SKIPPED:
        if outcome.note and not job.waited:
            _wait(target.job_id, outcome.note, job, handler, changes)
        return
    if transition is None:
        changes.record(target.job_id, handler.name, outcome.result, target.state, None, outcome.note)
        if target.whole_job:
            changes.job_columns(target.job_id, job.state, tries=outcome.tries)
        return
    if transition.task is not None:
        for view in target.tasks:
            _move_task(task_rows[view.id], transition.task, outcome, handler, changes, job)
    if target.whole_job and transition.job is not None:
        new = transition.job
        if new is DERIVED:
            new, _ = derived_job_state(
                (task_rows[v.id].state for v in target.tasks), gang=job.gang,
                max_task_failures=job.facts.max_task_failures,
                outcome=JobState(job.outcome) if job.outcome else None, cancelled=job.cancelled)
        extra = {"pending_reason": None} if new not in (JobState.PENDING, JobState.UNSCHEDULABLE) else {}
        if new is JobState.UNSCHEDULABLE:
            extra = {"pending_reason": outcome.note}  # why it never got placed stays readable
        if transition.cancel:
            extra["cancelled"] = True
        changes.job(target.job_id, job.state, new, handler=handler.name, result=outcome.result,
                    message=outcome.note, **extra)
        job.state = new
    elif not target.whole_job and transition.task is TaskState.ASSIGNED and job.pending_reason:
        job.pending_reason = None
        changes.job_columns(target.job_id, job.state, pending_reason=None)
    elif not target.whole_job and transition.task is TaskState.UNSCHEDULABLE and outcome.note:
        job.pending_reason = outcome.note
        changes.job_columns(target.job_id, job.state, pending_reason=outcome.note)


def _wait(job_id: int, note: str, job: _Job, handler: Handler, changes: ChangeSet) -> None:
    """Every wait is on record, once per job and run: a new reason is a new record, the same one is counted."""
    job.waited = True
    repeated = note == job.pending_reason
    if not repeated:
        job.pending_reason = note
        changes.job_columns(job_id, job.state, pending_reason=note)
    changes.wait(job_id, handler.name, job.state, note, repeated=repeated)


def _move_task(row: TaskRow, new: TaskState, outcome: Outcome, handler: Handler, changes: ChangeSet,
               job: _Job) -> None:
    if row.state is new or row.state in TASK_TERMINAL and new is not TaskState.PENDING:
        return
    if not TASK_TRANSITIONS.allows(row.state, new, handler.name):
        return  # not a task this handler moves (the table says which)
    if new is TaskState.PENDING:  # back to the queue: the next placement is a new attempt
        if row.state not in TASK_TERMINAL:
            changes.attempt(row.id, row.attempt, reason="returned to the queue", finished_at=changes.now)
        requeue(changes, row, handler=handler.name, result=outcome.result, message=outcome.note)
    elif new in TASK_TERMINAL:  # an attempt ends here as it would on a worker's report: charged alike
        end_attempt(changes, row, new, job=job, handler=handler.name, result=outcome.result, reason=outcome.note)
    elif new is TaskState.ASSIGNED:
        if row.worker_id is None:
            raise ValueError(f"task {row.id} is placed without a worker: its Place is missing")
        changes.task(row, new, handler=handler.name, result=outcome.result, message=outcome.note)
    else:
        changes.task(row, new, handler=handler.name, result=outcome.result, message=outcome.note)
        changes.attempt(row.id, row.attempt, state=new)


# --- the appliers of effects, by type -------------------------------------------------------------------


@dataclass
class _Run:
    """What an applier of a job's effect reads of the run."""

    handler: Handler
    jobs: dict[int, _Job]
    task_rows: dict[int, TaskRow]


def _place(effect: Place, changes: ChangeSet, run: _Run) -> None:
    """The worker and GPUs a placed task reserves, and its new attempt (its move to ASSIGNED is the outcome's)."""
    row = run.task_rows[effect.task_id]
    row.worker_id = effect.worker_id
    changes.task_columns(row, worker_id=effect.worker_id, gpu_ids=list(effect.gpu_ids))
    changes.new_attempt(row, effect.worker_id)
    PLACEMENTS.inc()


def _doom(effect: Doom, changes: ChangeSet, run: _Run) -> None:
    """A job that can never run ends FAILED with the cause: it terminates, and settling kills its tasks."""
    job = run.jobs[effect.job_id]
    changes.job(effect.job_id, job.state, JobState.TERMINATING, handler=run.handler.name,
                result=SchedulingResult.GIVE_UP, message=effect.cause, outcome=str(JobState.FAILED))
    job.state = JobState.TERMINATING


async def _preempt(connection: AsyncConnection, changes: ChangeSet, effects: list[Preempt]) -> None:
    await preempt_victims(connection, changes, [effect.victim for effect in effects])


# Effects about one job, applied with its other changes (set aside with them); effects about the run's world.
JOB_APPLIERS: dict[type[Effect], Callable[[Effect, ChangeSet, _Run], None]] = {Place: _place, Doom: _doom}
RUN_APPLIERS: dict[type[Effect], Callable[[AsyncConnection, ChangeSet, list], Awaitable[None]]] = {
    Preempt: _preempt}
