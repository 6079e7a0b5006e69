"""The coordinator: runs a handler and applies what it decided, in one transaction per run.

It is generic: it knows nothing of any one handler beyond its declared targets and
transitions. Reads are one query for targets (and one for worker room when placing),
writes go through one ChangeSet, and job states are settled from their tasks before commit.
Each job's changes are worked out apart and joined only if they all could be: a job the handler
raises about is set aside (target_errors) and the run goes on for the others.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from itertools import groupby

from corral.core.lifecycle import DERIVED, Outcome, SchedulingResult, Target, TaskView, judge
from corral.core.outcomes import derived_job_state
from corral.core.states import JOB_TERMINAL, TASK_TERMINAL, JobState, TaskState, is_legal
from corral.engine.attempts import end_attempt, requeue
from corral.engine.drain import observe
from corral.engine.handlers import Decision, Handler, JobFacts, Launcher, Snapshot
from corral.engine.priority_preemption import preempt_victims
from corral.engine.settle import settle_jobs
from corral.engine.target_errors import TargetError, TargetErrors, decide_apart
from corral.metrics import PLACEMENTS, SCHEDULING_SECONDS, TRANSITIONS
from corral.scheduling.placement import Request
from corral.store.changes import ChangeSet, TaskRow
from corral.store.reads import BATCH_ROWS, target_rows, task_row
from corral.store.scheduling_reads import read_cluster
from corral.store.store import Store

log = logging.getLogger("corral.coordinator")


@dataclass
class RunReport:
    """What a handler run changed, so the loop knows whom to wake."""

    changed: bool = False
    workers: set[str] = field(default_factory=set)
    outcomes: list[Outcome] = field(default_factory=list)


@dataclass
class _Job:
    state: JobState
    gang: bool
    facts: JobFacts
    pending_reason: str | None
    outcome: str | None
    cancelled: bool

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


async def run_handler(store: Store, handler: Handler, now: float, errors: TargetErrors | None = None) -> RunReport:
    """One run. A job the handler raises about is left out and reported to `errors` (kept across runs by the
    engine: that is how a streak is seen); the run goes on for the others and commits."""
    errors = errors or TargetErrors()
    async with store.write() as connection:
        rows = await target_rows(connection, handler.job_states, handler.gang_only, handler.task_states,
                                 handler.launcher_states, handler.batch_rows or BATCH_ROWS)
        if not rows:
            errors.report(handler.name, {})
            return RunReport()
        targets, job_info, task_rows = _targets(rows, handler)
        read_states = {job_id: info.state for job_id, info in job_info.items()}
        snapshot = Snapshot(now, {job_id: info.facts for job_id, info in job_info.items()})
        started = time.perf_counter()
        failed: dict[int, BaseException | str] = {}
        if handler.needs_rooms:
            snapshot.cluster = await read_cluster(connection)
            failed.update((job_id, cause) for job_id, cause in snapshot.cluster.unreadable.items()
                          if job_id in job_info)
        decision, targets = decide_apart(lambda some: handler.execute(some, snapshot),
                                         [t for t in targets if t.job_id not in failed], lambda t: t.job_id, failed)
        if handler.needs_rooms:
            SCHEDULING_SECONDS.observe(time.perf_counter() - started)
        outcomes = judge(targets, decision.result, handler.transitions, now=now, max_tries=handler.max_tries)
        changes = _work_out(outcomes, decision, handler, job_info, task_rows, failed, now)
        outcomes = [outcome for outcome in outcomes if outcome.target.job_id not in failed]
        for job_id, error in errors.report(handler.name, failed).items():
            _set_aside(job_id, error, handler, changes, read_states[job_id])
        await preempt_victims(connection, changes, decision.victims)
        if changes.empty:
            return RunReport(outcomes=outcomes)
        await changes.flush(connection)
        settled = await settle_jobs(connection, changes.touched_jobs, now, handler.name)
        observe(handler.name, outcomes, snapshot)
        return RunReport(True, changes.touched_workers | settled.touched_workers, outcomes)


def _work_out(outcomes: list[Outcome], decision: Decision, handler: Handler, job_info: dict[int, _Job],
              task_rows: dict[int, TaskRow], failed: dict, now: float) -> ChangeSet:
    """The run's changes, worked out job by job: a job whose changes raise goes to `failed` with none of them."""
    assignments = {a.task_id: a for a in decision.assignments}
    per_job: dict[int, ChangeSet] = {}
    for outcome in outcomes:
        job_id = outcome.target.job_id
        if job_id in failed:
            continue
        try:
            _apply(outcome, handler, per_job.setdefault(job_id, ChangeSet(now)), job_info, task_rows, assignments)
        except Exception as error:
            failed[job_id] = error
            continue
        TRANSITIONS.labels(handler.name, outcome.result).inc()
    for job_id, cause in decision.doomed.items():
        if job_id not in failed:
            _doom(job_id, cause, handler, per_job.setdefault(job_id, ChangeSet(now)), job_info)
    changes = ChangeSet(now)
    for job_id, job_changes in per_job.items():
        if job_id not in failed:
            changes.absorb(job_changes)
    return changes


def _set_aside(job_id: int, error: TargetError, handler: Handler, changes: ChangeSet, state: JobState) -> None:
    """Record the first failure of a streak on the job; end the job FAILED once the handler gives up on it."""
    if error.give_up and state not in JOB_TERMINAL and state is not JobState.TERMINATING:
        changes.job(job_id, state, JobState.TERMINATING, handler=handler.name, result=SchedulingResult.GIVE_UP,
                    message=error.note(handler.name), outcome=str(JobState.FAILED), pending_reason=None)
    elif error.first:
        changes.record(job_id, handler.name, SchedulingResult.SKIPPED, state, None, error.note(handler.name))


def _targets(rows, handler: Handler) -> tuple[list[Target], dict[int, _Job], dict[int, TaskRow]]:
    targets: list[Target] = []
    job_info: dict[int, _Job] = {}
    task_rows = {row.id: task_row(row) for row in rows}
    for job_id, group in groupby(rows, key=lambda r: r.job_id):
        group = list(group)
        first = group[0]
        facts = JobFacts(Request(first.cpu, first.memory, first.gpu), first.max_task_failures,
                         first.scheduling_timeout, first.max_retries_failure, first.max_retries_preemption,
                         first.grace_period, first.preemption_epoch,
                         _launcher(first) if handler.launcher_states else None)
        job_info[job_id] = _Job(JobState(first.job_state), first.gang, facts, first.pending_reason, first.outcome,
                                first.cancelled)
        views = [TaskView(r.id, r.index, TaskState(r.state), r.worker_id, r.failures, r.preemptions) for r in group]
        whole = first.job_state in handler.job_states and (first.gang or not handler.gang_only)
        if whole:
            targets.append(Target(job_id, True, first.job_state, first.job_since, first.job_tries,
                                  tuple(views), handler.timeout(facts)))
            continue
        for row, view in zip(group, views, strict=True):
            targets.append(Target(job_id, False, row.state, row.state_since, row.tries, (view,),
                                  handler.timeout(facts)))
    return targets, job_info, task_rows


def _launcher(row) -> Launcher:
    outcome = JobState(row.launcher_outcome) if row.launcher_outcome else None
    return Launcher(row.launcher_id, JobState(row.launcher_state), bool(row.launcher_cancelled), outcome)


def _apply(outcome: Outcome, handler: Handler, changes: ChangeSet, job_info: dict[int, _Job],
           task_rows: dict[int, TaskRow], assignments: dict) -> None:
    target, transition = outcome.target, outcome.transition
    job = job_info[target.job_id]
    if outcome.result is SchedulingResult.SKIPPED:
        # A wait is recorded when its reason changes, not on every pass.
        if outcome.note and outcome.note != job.pending_reason:
            job.pending_reason = outcome.note
            changes.job_columns(target.job_id, job.state, pending_reason=outcome.note)
            changes.record(target.job_id, handler.name, outcome.result, job.state, None, outcome.note)
        return
    if transition is None:
        changes.record(target.job_id, handler.name, outcome.result, target.state, None, outcome.note)
        if target.whole_job:
            changes.job_columns(target.job_id, job.state, tries=outcome.tries)
        return
    if transition.task is not None:
        for view in target.tasks:
            _move_task(task_rows[view.id], transition.task, outcome, handler, changes, assignments, job)
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


def _doom(job_id: int, cause: str, handler: Handler, changes: ChangeSet, job_info: dict[int, _Job]) -> None:
    """A job that can never run ends FAILED with the cause: it terminates, and settling kills its tasks."""
    job = job_info[job_id]
    changes.job(job_id, job.state, JobState.TERMINATING, handler=handler.name, result=SchedulingResult.GIVE_UP,
                message=cause, outcome=str(JobState.FAILED))
    job.state = JobState.TERMINATING


def _move_task(row: TaskRow, new: TaskState, outcome: Outcome, handler: Handler, changes: ChangeSet,
               assignments: dict, job: _Job) -> None:
    if row.state is new or row.state in TASK_TERMINAL and new is not TaskState.PENDING:
        return
    if not is_legal(row.state, new):
        return
    if new is TaskState.PENDING:  # back to the queue: the next placement is a new attempt
        if row.state not in TASK_TERMINAL:
            changes.attempt(row.id, row.attempt, reason="returned to the queue", finished_at=changes.now)
        requeue(changes, row, handler=handler.name, result=outcome.result, message=outcome.note)
    elif new in TASK_TERMINAL:  # an attempt ends here as it would on a worker's report: charged alike
        end_attempt(changes, row, new, job=job, handler=handler.name, result=outcome.result, reason=outcome.note)
    elif new is TaskState.ASSIGNED:
        assignment = assignments[row.id]
        row.worker_id = assignment.worker_id
        changes.task(row, new, handler=handler.name, result=outcome.result, message=outcome.note,
                     worker_id=assignment.worker_id, gpu_ids=list(assignment.gpu_ids))
        changes.new_attempt(row, assignment.worker_id)
        PLACEMENTS.inc()
    else:
        changes.task(row, new, handler=handler.name, result=outcome.result, message=outcome.note)
        changes.attempt(row.id, row.attempt, state=new)
