"""The reads a scheduling pass needs, a handful of queries: workers and their free room, the tasks
holding room, the placement facts of active jobs, where retried tasks failed, dependencies, policy.
"""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import and_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.spec import MAX_GPU
from corral.core.states import JOB_ACTIVE, TASK_HOLDS_RESOURCES, TaskState, WorkerState
from corral.scheduling.preemption import RunningTask
from corral.scheduling.rooms import Request, WorkerRoom
from corral.scheduling.snapshot import ClusterSnapshot, JobEnd, JobPlacement
from corral.store.policy import read_policy
from corral.store.schema import attempts, jobs, tasks, workers

CHUNK = 5000  # ids per IN (...) list, under every driver's parameter limit
STOPPING = frozenset({TaskState.PREEMPTING, TaskState.TERMINATING})


async def read_cluster(connection: AsyncConnection) -> ClusterSnapshot:
    unreadable: dict[int, str] = {}
    job_facts = await _active_jobs(connection, unreadable)
    running = await _running_tasks(connection, job_facts)
    return ClusterSnapshot(
        unreadable=unreadable,
        rooms=await _rooms(connection, running),
        running=running,
        jobs=job_facts,
        avoid=await _failed_on(connection),
        dependencies=await _dependencies(connection, job_facts),
        policy=await read_policy(connection),
    )


async def rooms_and_running(connection: AsyncConnection) -> tuple[list[WorkerRoom], list[RunningTask]]:
    """Alive workers with their free room, and the tasks holding it, as placement sees them (the serving router
    asks what fits). Only the jobs holding room are read: a backlog of pending jobs costs this nothing."""
    running = await _running_tasks(connection, await _active_jobs(connection, holding_room_only=True))
    return await _rooms(connection, running), running


async def _active_jobs(connection: AsyncConnection, unreadable: dict[int, str] | None = None, *,
                       holding_room_only: bool = False) -> dict[int, JobPlacement]:
    """The placement facts of active jobs (`holding_room_only`: of those with tasks holding room). A spec that
    cannot be read (a row older than a validation) is noted in `unreadable` and read as the defaults, so that
    the room its running tasks hold is still counted."""
    query = (select(jobs.c.id, jobs.c.spec, jobs.c.priority, jobs.c.gang)
             .where(jobs.c.state.in_([str(s) for s in JOB_ACTIVE])))
    if holding_room_only:
        query = query.where(jobs.c.id.in_(select(tasks.c.job_id).where(_holds_room())))
    rows = (await connection.execute(query)).all()
    facts = {}
    for row in rows:
        try:
            facts[row.id] = JobPlacement.from_spec(row.spec, priority=row.priority, gang=row.gang)
        except Exception as error:
            facts[row.id] = JobPlacement(priority=row.priority, gang=row.gang)
            if unreadable is not None:
                unreadable[row.id] = f"its spec cannot be read: {type(error).__name__}: {error}"
    return facts


async def _running_tasks(connection: AsyncConnection, job_facts: dict[int, JobPlacement]) -> list[RunningTask]:
    rows = (await connection.execute(
        select(tasks.c.id, tasks.c.job_id, tasks.c.worker_id, tasks.c.state, tasks.c.cpu, tasks.c.memory,
               tasks.c.gpu, tasks.c.gpu_ids, attempts.c.assigned_at)
        .select_from(tasks.outerjoin(attempts, and_(attempts.c.task_id == tasks.c.id,
                                                    attempts.c.attempt == tasks.c.attempt)))
        .where(_holds_room())
    )).all()
    running = []
    for row in rows:
        job = job_facts.get(row.job_id, JobPlacement())
        running.append(RunningTask(
            task_id=row.id, job_id=row.job_id, worker_id=row.worker_id,
            request=Request(row.cpu, row.memory, row.gpu, job.custom, job.gpu_memory),
            gpu_ids=tuple(row.gpu_ids or ()),
            priority=job.priority, project=job.project, since=row.assigned_at or 0.0, gang=job.gang,
            stopping=TaskState(row.state) in STOPPING,
        ))
    return running


def _holds_room():
    return and_(tasks.c.state.in_([str(s) for s in TASK_HOLDS_RESOURCES]), tasks.c.worker_id.is_not(None))


async def _rooms(connection: AsyncConnection, running: list[RunningTask]) -> list[WorkerRoom]:
    """Alive workers with their free room: capacity minus what the tasks holding room reserve."""
    alive = (await connection.execute(
        select(workers).where(workers.c.state == WorkerState.ALIVE).order_by(workers.c.registered_at)
    )).all()
    on_worker: dict[str, list[RunningTask]] = defaultdict(list)
    for task in running:
        on_worker[task.worker_id].append(task)
    rooms = []
    for worker in alive:
        custom = {name: float(amount) for name, amount in (worker.custom or {}).items()}
        gpus = min(worker.gpu, MAX_GPU)  # a row from before registration was bounded costs what a real machine does
        room = WorkerRoom(
            id=worker.id, name=worker.name, cpu=worker.cpu, memory=worker.memory, gpu=gpus,
            free_cpu=worker.cpu, free_memory=worker.memory, free_gpu_ids=list(range(gpus)),
            pool=worker.pool, labels=dict(worker.labels or {}), custom=custom, free_custom=dict(custom),
            gpu_memory=_device_memory(gpus, worker.gpu_devices), pythons=tuple(worker.pythons or ()),
            filesystem=worker.filesystem, shared_fs=tuple(worker.shared_fs or ()))
        for task in on_worker.get(worker.id, ()):
            room.hold(task.request, task.gpu_ids)
        rooms.append(room)
    return rooms


async def file_systems_in_pool(connection: AsyncConnection, pool: str) -> list[tuple[str | None, list[str]]]:
    """The file system id and the shared directories of each alive worker of `pool`."""
    rows = (await connection.execute(
        select(workers.c.filesystem, workers.c.shared_fs)
        .where(workers.c.state == WorkerState.ALIVE, workers.c.pool == pool))).all()
    return [(row.filesystem, list(row.shared_fs or ())) for row in rows]


def _device_memory(gpus: int, devices: list[dict] | None) -> tuple[int, ...]:
    """Bytes per device index as NVML reported them; empty when no device's memory is known (virtual GPUs)."""
    by_index = {device["index"]: device.get("memory") or 0 for device in devices or ()}
    memory = tuple(by_index.get(i, 0) for i in range(gpus))
    return memory if any(memory) else ()


async def _failed_on(connection: AsyncConnection) -> dict[int, frozenset[str]]:
    """Workers each pending task already failed on."""
    rows = (await connection.execute(
        select(attempts.c.task_id, attempts.c.worker_id)
        .select_from(attempts.join(tasks, tasks.c.id == attempts.c.task_id))
        .where(tasks.c.state == TaskState.PENDING, attempts.c.state == TaskState.FAILED,
               attempts.c.worker_id.is_not(None))
    )).all()
    failed: dict[int, set[str]] = defaultdict(set)
    for row in rows:
        failed[row.task_id].add(row.worker_id)
    return {task_id: frozenset(ids) for task_id, ids in failed.items()}


async def _dependencies(connection: AsyncConnection, job_facts: dict[int, JobPlacement]) -> dict[int, JobEnd]:
    wanted = sorted({j for job in job_facts.values() for j in (*job.after, *job.after_any)})
    ends: dict[int, JobEnd] = {}
    for start in range(0, len(wanted), CHUNK):
        for row in (await connection.execute(
            select(jobs.c.id, jobs.c.state, jobs.c.finished_at).where(jobs.c.id.in_(wanted[start:start + CHUNK]))
        )).all():
            ends[row.id] = JobEnd(str(row.state), row.finished_at)
    return ends
