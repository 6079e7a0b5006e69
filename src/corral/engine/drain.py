"""The gang drain at the controller's edges: started where a member's end is learned, observed
where the engine forces and completes it (corral.core.drain holds the decisions).

Every step is logged with the job id and the epoch ("gang drain started", "task preempted",
"gang drain completed", "gang placed"), so grepping one job id tells the whole story; the same
steps are in the job's history.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.drain import DRAINABLE_JOB_STATES, Budgets, Member, plan_drain, preemption_move
from corral.core.lifecycle import Outcome, SchedulingResult
from corral.core.states import JobState, TaskState
from corral.engine.attempts import requeue
from corral.engine.handlers import Snapshot
from corral.engine.preemption import JobRef, preempt_tasks
from corral.engine.settle import task_columns
from corral.metrics import DRAIN_SECONDS, DRAINS_COMPLETED, FORCE_DRAINED, GANGS_PREEMPTED
from corral.store.changes import ChangeSet, TaskRow
from corral.store.reads import task_row
from corral.store.schema import jobs, tasks

log = logging.getLogger("corral.drain")

HANDLER = "DrainGang"


async def start_drains(connection: AsyncConnection, triggers: Mapping[int, Sequence[int]], now: float) -> ChangeSet:
    """Start one drain per gang in `triggers` (job id -> ids of the members whose end starts it).

    Runs after those ends are written, in the same transaction, so all the members that ended
    together count toward one drain, one epoch.
    """
    changes = ChangeSet(now)
    if not triggers:
        return changes
    ids = list(triggers)
    job_rows = (await connection.execute(
        select(jobs.c.id, jobs.c.state, jobs.c.cancelled, jobs.c.preemption_epoch, jobs.c.max_retries_failure,
               jobs.c.max_retries_preemption).where(jobs.c.id.in_(ids)).order_by(jobs.c.id)
    )).all()
    members = defaultdict(list)
    for row in (await connection.execute(
        select(*task_columns(), tasks.c.reason).where(tasks.c.job_id.in_(ids)).order_by(tasks.c.index)
    )).all():
        members[row.job_id].append(row)
    for job in job_rows:
        state = JobState(job.state)
        if state not in DRAINABLE_JOB_STATES or job.cancelled:
            continue
        rows = {r.index: task_row(r) for r in members[job.id]}
        reasons = {r.index: r.reason for r in members[job.id]}
        ended = {row.index for row in rows.values() if row.id in triggers[job.id]}
        budgets = Budgets(job.max_retries_failure, job.max_retries_preemption)
        plan = plan_drain((Member(r.index, r.state, r.failures, r.preemptions) for r in rows.values()),
                          ended, budgets)
        first = rows[plan.trigger]
        cause = f"task {plan.trigger} {first.state}" + (f" ({reasons[plan.trigger]})" if reasons[plan.trigger] else "")
        for index in plan.requeue:
            row = rows[index]
            requeue(changes, row, handler=HANDLER,
                    message=f"attempt {row.attempt} {row.state}; back to PENDING with its gang "
                            f"(budget used: {row.failures} failures, {row.preemptions} preemptions)")
        drain_gang(changes, JobRef(job.id, state, job.preemption_epoch),
                   [rows[i] for i in (*plan.preempt, *plan.release)], cause=cause, trigger=plan.trigger)
    await changes.flush(connection)
    return changes


def drain_gang(changes: ChangeSet, job: JobRef, rows: Sequence[TaskRow], *, cause: str,
               trigger: int | None = None) -> int:
    """Put a placed gang in DRAINING under a new epoch and preempt `rows`; returns the epoch.

    For a member's end (`trigger`, its index) or to make room for other work (no trigger):
    ForceDrain and CompleteDrain take it from there, and every stopped member is refunded.
    """
    stopping = sum(1 for row in rows if preemption_move(row.state) is TaskState.PREEMPTING)
    changes.job(job.id, job.state, JobState.DRAINING, handler=HANDLER, drain_trigger=trigger,
                message=f"gang drain started (epoch {job.epoch + 1}): {cause}; {stopping} to preempt, "
                        f"{len(rows) - stopping} released")
    epoch = preempt_tasks(changes, JobRef(job.id, JobState.DRAINING, job.epoch), rows, handler=HANDLER,
                          reason=f"gang drain: {cause}")
    GANGS_PREEMPTED.inc()
    log.info("gang drain started job=%s epoch=%s trigger_task=%s cause=%r preempting=%d released=%d",
             job.id, epoch, trigger, cause, stopping, len(rows) - stopping)
    return epoch


def observe(handler: str, outcomes: Sequence[Outcome], snapshot: Snapshot) -> None:
    """Metrics and log lines for the drain steps a handler run made (called once it is written)."""
    for outcome in outcomes:
        target = outcome.target
        facts = snapshot.jobs[target.job_id]
        if handler == "ForceDrain" and outcome.result is SchedulingResult.EXPIRED:
            forced = [t for t in target.tasks if t.state is TaskState.PREEMPTING]
            FORCE_DRAINED.inc(len(forced))
            for task in forced:
                log.warning("task preempted (forced past the drain timeout) job=%s task=%s index=%s epoch=%s",
                            target.job_id, task.id, task.index, facts.preemption_epoch)
        elif handler == "CompleteDrain" and outcome.result in (SchedulingResult.SUCCESS, SchedulingResult.GIVE_UP):
            verdict = "requeued" if outcome.result is SchedulingResult.SUCCESS else "failed"
            DRAINS_COMPLETED.labels(verdict).inc()
            DRAIN_SECONDS.observe(max(0.0, snapshot.now - target.since))
            log.info("gang drain completed job=%s epoch=%s outcome=%s drain_seconds=%.3f note=%r", target.job_id,
                     facts.preemption_epoch, verdict, snapshot.now - target.since, outcome.note)
        elif handler == "ScheduleJobs" and outcome.result is SchedulingResult.SUCCESS and target.whole_job:
            log.info("gang placed job=%s epoch=%s gang_size=%d", target.job_id, facts.preemption_epoch,
                     len(target.tasks))
