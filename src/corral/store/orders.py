"""What a worker's orders are derived from: its tasks that wait on it, with their jobs and their owners' local
accounts, and the gangs' masters."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable

from sqlalchemy import Text, and_, bindparam, cast, select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.states import TaskState
from corral.store.off_loop import rows_of
from corral.store.schema import jobs, tasks, users, workers

T = TaskState
ORDERED = (T.ASSIGNED, T.STARTING, T.TERMINATING, T.PREEMPTING)  # the task states a worker has orders for


async def ordered_tasks(connection: AsyncConnection, worker_ids: Collection[str]) -> list:
    """The workers' tasks in an ORDERED state, by id, with their worker, the columns of their jobs that orders carry
    (the spec as its stored JSON text, `spec_text`: `job_specs` parses each job's once, where every task row of a
    wave carries the same) and the local account of each job's owner (`unix_user`, None when the owner has none).

    Their rows are read off the event loop: hundreds of milliseconds for a batch of heartbeats at a thousand
    workers."""
    return await rows_of(await connection.execute(_ORDERED_TASKS, {"workers": list(worker_ids)}))


def job_specs(rows: Iterable) -> dict[int, dict]:
    """Each job's spec among `ordered_tasks`' rows, parsed once: every row of a job carries the same text."""
    specs: dict[int, dict] = {}
    for row in rows:
        if row.job_id not in specs:
            specs[row.job_id] = json.loads(row.spec_text)
    return specs


# Made once (every heartbeat with orders to read runs it; made afresh it cost more to build and to walk for
# SQLAlchemy's cache key than to run), the workers' ids an expanding parameter.
_ORDERED_TASKS = (
    select(tasks.c.id, tasks.c.worker_id, tasks.c.job_id, tasks.c.index, tasks.c.state, tasks.c.attempt,
           tasks.c.gpu, tasks.c.gpu_ids,
           tasks.c.preempt_epoch, tasks.c.checkpoint_epoch,
           cast(jobs.c.spec, Text).label("spec_text"), jobs.c.gang, jobs.c.state.label("job_state"),
           jobs.c.replicas, jobs.c.cancelled, jobs.c.owner, users.c.unix_user)
    .select_from(tasks.join(jobs, tasks.c.job_id == jobs.c.id).outerjoin(users, users.c.name == jobs.c.owner))
    .where(tasks.c.worker_id.in_(bindparam("workers", expanding=True)), tasks.c.state.in_(ORDERED))
    .order_by(tasks.c.id))


async def gang_masters(connection: AsyncConnection, job_ids: Collection[int]) -> dict[int, str]:
    """Address of the worker that holds task 0 of each gang: its master."""
    if not job_ids:
        return {}
    rows = (await connection.execute(
        select(tasks.c.job_id, workers.c.address)
        .select_from(tasks.join(workers, tasks.c.worker_id == workers.c.id))
        .where(and_(tasks.c.job_id.in_(job_ids), tasks.c.index == 0))
    )).all()
    return {row.job_id: row.address for row in rows}
