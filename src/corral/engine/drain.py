"""The gang drain started where a member's end is learned (a worker's report, the reaper) or where a
scheduling pass preempts a gang; ForceDrain and CompleteDrain finish it (corral.core.drain holds the decisions).

Every step is logged with the job id and the epoch ("gang drain started", "task preempted",
"gang drain completed", "gang placed"), so grepping one job id tells the whole story; the same
steps are in the job's history.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from corral.core.drain import Budgets, Member, plan_drain, preemption_move
from corral.core.states import GANG_PLACED, Fact, JobState, TaskState
from corral.engine.attempts import requeue
from corral.engine.preemption import JobRef, preempt_tasks
from corral.metrics import GANGS_PREEMPTED
from corral.store.changes import ChangeSet, TaskRow
from corral.store.reads import jobs_and_members, task_row

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

log = logging.getLogger("corral.drain")

HANDLER = Fact.DRAIN


async def start_drains(connection: AsyncConnection, changes: ChangeSet, triggers: Mapping[int, Sequence[int]]) -> None:
    """Start one drain per gang in `triggers` (job id -> ids of the members whose end starts it), in `changes`.

    The members' ends are already in `changes`, so all the members that ended together count toward one drain,
    one epoch.
    """
    if not triggers:
        return
    job_rows, members = await jobs_and_members(connection, triggers)
    for job in job_rows:
        state = JobState(changes.job_value(job.id, "state", job.state))
        if state not in GANG_PLACED or changes.job_value(job.id, "cancelled", job.cancelled):
            continue
        rows = {r.index: changes.row(r.id) or task_row(r) for r in members[job.id]}
        reasons = {r.index: r.reason for r in members[job.id]}
        ended = {row.index for row in rows.values() if row.id in triggers[job.id]}
        budgets = Budgets(job.max_retries_failure, job.max_retries_preemption)
        plan = plan_drain((Member(r.index, r.state, r.failures, r.preemptions) for r in rows.values()),
                          ended, budgets)
        first = rows[plan.trigger]
        reason = changes.task_value(first.id, "reason", reasons[plan.trigger])
        cause = f"task {plan.trigger} {first.state}" + (f" ({reason})" if reason else "")
        for index in plan.requeue:
            row = rows[index]
            requeue(changes, row, handler=HANDLER,
                    message=f"attempt {row.attempt} {row.state}; back to PENDING with its gang "
                            f"(budget used: {row.failures} failures, {row.preemptions} preemptions)")
        epoch = changes.job_value(job.id, "preemption_epoch", job.preemption_epoch)
        drain_gang(changes, JobRef(job.id, state, epoch), [rows[i] for i in (*plan.preempt, *plan.release)],
                   cause=cause, trigger=plan.trigger)


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
