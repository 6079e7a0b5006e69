"""Priority preemption at the edge: the victims a scheduling pass chose are stopped through the
same path as a gang drain (PREEMPTING under a new epoch, SIGTERM, grace, SIGKILL, acknowledgement).

An independent task comes back PENDING within its preemption budget (PREEMPTED when it is used
up; an ASSIGNED one goes back at no cost); a gang victim drains whole and is placed again as one.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.drain import DRAINABLE_JOB_STATES, preemption_move
from corral.core.states import JobState
from corral.engine.drain import drain_gang
from corral.engine.preemption import JobRef, preempt_tasks
from corral.engine.settle import task_columns
from corral.metrics import TASKS_PREEMPTED
from corral.scheduling.preemption import RunningTask
from corral.store.changes import ChangeSet
from corral.store.reads import task_row
from corral.store.schema import jobs, tasks

log = logging.getLogger("corral.preemption")

HANDLER = "PriorityPreemption"
REASON = "priority preemption: room for a higher-priority job"


async def preempt_victims(connection: AsyncConnection, changes: ChangeSet, victims: Sequence[RunningTask]) -> None:
    if not victims:
        return
    job_ids = sorted({v.job_id for v in victims})
    chosen = {v.task_id for v in victims}
    job_rows = (await connection.execute(
        select(jobs.c.id, jobs.c.state, jobs.c.gang, jobs.c.preemption_epoch).where(jobs.c.id.in_(job_ids))
    )).all()
    rows = defaultdict(list)
    for row in (await connection.execute(select(*task_columns()).where(tasks.c.job_id.in_(job_ids)))).all():
        rows[row.job_id].append(task_row(row))
    for job in job_rows:
        state = JobState(job.state)
        ref = JobRef(job.id, state, job.preemption_epoch)
        if job.gang:
            if state not in DRAINABLE_JOB_STATES:
                continue
            members = [r for r in rows[job.id] if preemption_move(r.state) is not None]
            epoch = drain_gang(changes, ref, members, cause="priority preemption")
        else:
            members = [r for r in rows[job.id] if r.id in chosen and preemption_move(r.state) is not None]
            if not members:
                continue
            epoch = preempt_tasks(changes, ref, members, handler=HANDLER, reason=REASON)
        TASKS_PREEMPTED.inc(len(members))
        log.info("priority preemption job=%s epoch=%s tasks=%s", job.id, epoch, [r.id for r in members])
