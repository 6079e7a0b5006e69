"""What the worker list and the overview read about workers: their rows and what their tasks hold."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.states import TASK_HOLDS_RESOURCES
from corral.store.off_loop import rows_of
from corral.store.schema import jobs, tasks, workers


@dataclass(frozen=True)
class GpuHolder:
    """A task holding GPUs, as the worker list shows it per device."""

    task_id: int
    job_id: int
    index: int
    gpu: float  # whole devices, or a share of one
    gpu_ids: list[int]
    gpu_memory: int  # bytes each device has at least, or, for a share, the bytes of its device it reserves


async def worker_rows(connection: AsyncConnection) -> list:
    """Full `workers` rows, oldest registration first; read off the event loop (every worker's JSON columns parsed:
    the cluster's samples read them all every 10 s)."""
    return await rows_of(await connection.execute(select(workers).order_by(workers.c.registered_at)))


@dataclass(frozen=True)
class Held:
    """What one worker's tasks hold, and how many tasks hold it."""

    cpu: float
    memory: int
    gpu: float  # summed in hundredths: shares read 1.75, never 1.7500000000000002
    n: int


async def held_by_worker(connection: AsyncConnection) -> dict[str, Held]:
    """Per worker id, what its tasks hold; a worker whose tasks hold nothing is left out."""
    rows = (await connection.execute(
        select(tasks.c.worker_id, func.sum(tasks.c.cpu).label("cpu"), func.sum(tasks.c.memory).label("memory"),
               func.sum(tasks.c.gpu).label("gpu"), func.count().label("n"))
        .where(tasks.c.state.in_([str(s) for s in TASK_HOLDS_RESOURCES]), tasks.c.worker_id.is_not(None))
        .group_by(tasks.c.worker_id))).all()
    return {r.worker_id: Held(cpu=r.cpu or 0.0, memory=int(r.memory or 0), gpu=round(r.gpu or 0, 2), n=r.n)
            for r in rows}


async def gpu_holders(connection: AsyncConnection) -> dict[str, list[GpuHolder]]:
    """Per worker id, the tasks holding GPUs on it: task_id, job_id, index, gpu (devices, or a share of one),
    gpu_ids, and gpu_memory (what a share reserves of its device, from the job's spec)."""
    rows = (await connection.execute(
        select(tasks.c.worker_id, tasks.c.id.label("task_id"), tasks.c.job_id, tasks.c.index, tasks.c.gpu,
               tasks.c.gpu_ids, jobs.c.spec)
        .select_from(tasks.join(jobs, jobs.c.id == tasks.c.job_id))
        .where(tasks.c.state.in_([str(s) for s in TASK_HOLDS_RESOURCES]), tasks.c.worker_id.is_not(None),
               tasks.c.gpu > 0)
        .order_by(tasks.c.id))).all()
    holders: dict[str, list[GpuHolder]] = defaultdict(list)
    for row in rows:
        resources = row.spec.get("resources") if isinstance(row.spec, dict) else None  # unreadable: none reserved
        resources = resources if isinstance(resources, dict) else {}
        holders[row.worker_id].append(GpuHolder(row.task_id, row.job_id, row.index, row.gpu, list(row.gpu_ids or ()),
                                                int(resources.get("gpu_memory") or 0)))
    return holders
