"""The reads a handler run needs, one query each: its targets, and the free room on workers."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection

from sqlalchemy import and_, false, func, or_, select, true
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.states import TASK_HOLDS_RESOURCES, JobState, TaskState, WorkerState
from corral.scheduling.placement import WorkerRoom
from corral.store.changes import TaskRow
from corral.store.schema import jobs, tasks, workers

BATCH_ROWS = 10_000  # a handler run fetches at most this many task rows; the rest wait a pass

JOB_COLUMNS = (
    jobs.c.id.label("job_id"), jobs.c.state.label("job_state"), jobs.c.gang, jobs.c.tries.label("job_tries"),
    jobs.c.state_since.label("job_since"), jobs.c.max_task_failures, jobs.c.scheduling_timeout,
    jobs.c.pending_reason, jobs.c.outcome, jobs.c.cancelled, jobs.c.max_retries_failure,
    jobs.c.max_retries_preemption, jobs.c.grace_period, jobs.c.preemption_epoch,
)
TASK_COLUMNS = (
    tasks.c.id, tasks.c.index, tasks.c.state, tasks.c.state_since, tasks.c.tries, tasks.c.attempt,
    tasks.c.worker_id, tasks.c.failures, tasks.c.preemptions, tasks.c.cpu, tasks.c.memory, tasks.c.gpu,
)


async def target_rows(
    connection: AsyncConnection,
    job_states: Collection[JobState],
    gang_only: bool,
    task_states: Collection[TaskState],
    launcher_states: Collection[JobState] = (),
) -> list:
    """Rows (job columns + task columns) of whole-job targets and of task targets, in submission order.

    With `launcher_states`, only jobs launched by a job in one of them, with that job's columns.
    """
    whole = and_(jobs.c.state.in_([str(s) for s in job_states]), jobs.c.gang if gang_only else true())
    per_task = and_(
        jobs.c.gang.is_(False),
        jobs.c.state.in_([JobState.PENDING, JobState.RUNNING]),
        tasks.c.state.in_([str(s) for s in task_states]),
    ) if task_states else false()
    query = (
        select(*JOB_COLUMNS, *TASK_COLUMNS)
        .select_from(tasks.join(jobs, tasks.c.job_id == jobs.c.id))
        .where(or_(whole if job_states else false(), per_task))
        .order_by(jobs.c.id, tasks.c.index)
        .limit(BATCH_ROWS)
    )
    if launcher_states:
        launcher = jobs.alias("launcher")
        query = query.join(launcher, jobs.c.launched_by == launcher.c.id).add_columns(
            launcher.c.id.label("launcher_id"), launcher.c.state.label("launcher_state"),
            launcher.c.cancelled.label("launcher_cancelled"), launcher.c.outcome.label("launcher_outcome"),
        ).where(launcher.c.state.in_([str(s) for s in launcher_states]))
    rows = (await connection.execute(query)).all()
    if len(rows) == BATCH_ROWS and rows[0].job_id != rows[-1].job_id:
        last = rows[-1].job_id  # its tasks may be cut off: leave the whole job to the next pass
        rows = [row for row in rows if row.job_id != last]
    return rows


def task_row(row) -> TaskRow:
    return TaskRow(row.id, row.job_id, row.index, TaskState(row.state), row.attempt, row.worker_id,
                   row.failures, row.preemptions)


async def worker_rooms(connection: AsyncConnection) -> list[WorkerRoom]:
    """Alive workers with their free capacity: capacity minus what tasks holding resources reserve."""
    alive = (await connection.execute(
        select(workers).where(workers.c.state == WorkerState.ALIVE).order_by(workers.c.registered_at)
    )).all()
    holding = [str(s) for s in TASK_HOLDS_RESOURCES]
    used = {
        row.worker_id: row
        for row in (await connection.execute(
            select(tasks.c.worker_id, func.sum(tasks.c.cpu).label("cpu"), func.sum(tasks.c.memory).label("memory"))
            .where(tasks.c.state.in_(holding), tasks.c.worker_id.is_not(None))
            .group_by(tasks.c.worker_id)
        )).all()
    }
    gpus_taken: dict[str, set[int]] = defaultdict(set)
    for row in (await connection.execute(
        select(tasks.c.worker_id, tasks.c.gpu_ids).where(tasks.c.state.in_(holding), tasks.c.gpu > 0)
    )).all():
        gpus_taken[row.worker_id].update(row.gpu_ids or [])
    rooms = []
    for worker in alive:
        use = used.get(worker.id)
        rooms.append(WorkerRoom(
            id=worker.id, name=worker.name, cpu=worker.cpu, memory=worker.memory, gpu=worker.gpu,
            free_cpu=worker.cpu - (use.cpu if use else 0.0),
            free_memory=worker.memory - int(use.memory if use else 0),
            free_gpu_ids=[i for i in range(worker.gpu) if i not in gpus_taken[worker.id]],
        ))
    return rooms
