"""Priority preemption at the edge: the victims a scheduling pass chose are stopped through the
same path as a gang drain (PREEMPTING under a new epoch, SIGTERM, grace, SIGKILL, acknowledgement).

An independent task comes back PENDING within its preemption budget (PREEMPTED when it is used
up; an ASSIGNED one goes back at no cost); a gang victim drains whole and is placed again as one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from corral.core.drain import preemption_move
from corral.core.states import GANG_PLACED, Fact, JobState
from corral.engine.drain import drain_gang
from corral.engine.preemption import JobRef, preempt_tasks
from corral.metrics import TASKS_PREEMPTED
from corral.scheduling.preemption import RunningTask
from corral.store.changes import ChangeSet
from corral.store.reads import jobs_and_members, task_row

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

log = logging.getLogger("corral.preemption")

HANDLER = Fact.PREEMPT
REASON = "priority preemption: room for a higher-priority job"


async def preempt_victims(connection: AsyncConnection, changes: ChangeSet, victims: Sequence[RunningTask]) -> None:
    if not victims:
        return
    chosen = {v.task_id for v in victims}
    job_rows, members = await jobs_and_members(connection, {v.job_id for v in victims})
    for job in job_rows:
        state = JobState(changes.job_value(job.id, "state", job.state))
        ref = JobRef(job.id, state, changes.job_value(job.id, "preemption_epoch", job.preemption_epoch))
        rows = [changes.row(r.id) or task_row(r) for r in members[job.id]]
        if job.gang:
            if state not in GANG_PLACED:
                continue
            stopped = [r for r in rows if preemption_move(r.state) is not None]
            epoch = drain_gang(changes, ref, stopped, cause="priority preemption")
        else:
            stopped = [r for r in rows if r.id in chosen and preemption_move(r.state) is not None]
            if not stopped:
                continue
            epoch = preempt_tasks(changes, ref, stopped, handler=HANDLER, reason=REASON)
        TASKS_PREEMPTED.inc(len(stopped))
        log.info("priority preemption job=%s epoch=%s tasks=%s", job.id, epoch, [r.id for r in stopped])
