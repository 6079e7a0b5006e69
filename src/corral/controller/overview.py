"""The cluster at a glance: counts by state, capacity and use per pool, and the queue, read in one go.

The same summary feeds the dashboard's overview, the scrape-time gauges of /metrics and the
samples behind the overview's charts, so the three always agree.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from pydantic import BaseModel
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.states import JOB_TERMINAL, TASK_HOLDS_RESOURCES, TaskState, WorkerState
from corral.store.schema import jobs, tasks, workers

RESOURCES = ("cpu", "memory", "gpu")
DEFAULT_POOL = "default"


class WorkerUse(BaseModel):
    id: str
    name: str
    pool: str
    state: str
    capacity: dict[str, float]
    used: dict[str, float]
    tasks: int


class PoolUse(BaseModel):
    pool: str
    workers: int
    capacity: dict[str, float]
    used: dict[str, float]


class QueueStat(BaseModel):
    pool: str
    jobs: int  # jobs with at least one task waiting to be placed
    tasks: int  # tasks waiting to be placed
    oldest_seconds: float  # how long the longest-waiting of those jobs has existed


class ClusterSummary(BaseModel):
    at: float
    jobs: dict[str, int]
    tasks: dict[str, int]
    workers: dict[str, int]
    pools: list[PoolUse]
    queue: list[QueueStat]
    per_worker: list[WorkerUse]


def worker_pool(row) -> str:
    """A worker's pool: its `pool` column where the schema has one, else its `pool` label."""
    return getattr(row, "pool", None) or (row.labels or {}).get("pool") or DEFAULT_POOL


def job_pool(row) -> str:
    return getattr(row, "pool", None) or DEFAULT_POOL


async def summarize(connection: AsyncConnection, now: float) -> ClusterSummary:
    job_counts = dict((await connection.execute(
        select(jobs.c.state, func.count()).group_by(jobs.c.state))).all())
    task_counts = dict((await connection.execute(
        select(tasks.c.state, func.count()).group_by(tasks.c.state))).all())
    worker_rows = (await connection.execute(select(workers).order_by(workers.c.registered_at))).all()
    use = {
        r.worker_id: r
        for r in (await connection.execute(
            select(tasks.c.worker_id, func.sum(tasks.c.cpu).label("cpu"), func.sum(tasks.c.memory).label("memory"),
                   func.sum(tasks.c.gpu).label("gpu"), func.count().label("n"))
            .where(tasks.c.state.in_([str(s) for s in TASK_HOLDS_RESOURCES]), tasks.c.worker_id.is_not(None))
            .group_by(tasks.c.worker_id))).all()
    }
    per_worker = []
    for w in worker_rows:
        u = use.get(w.id)
        per_worker.append(WorkerUse(
            id=w.id, name=w.name, pool=worker_pool(w), state=w.state,
            capacity={"cpu": w.cpu, "memory": w.memory, "gpu": w.gpu},
            used={k: float(getattr(u, k) or 0) if u else 0.0 for k in RESOURCES}, tasks=u.n if u else 0))
    return ClusterSummary(
        at=now, jobs=job_counts, tasks=task_counts,
        workers=dict(Counter(w.state for w in worker_rows)),
        pools=_pools(per_worker), queue=await _queue(connection, now), per_worker=per_worker)


def _pools(per_worker: list[WorkerUse]) -> list[PoolUse]:
    """Capacity and use of the workers that are alive, per pool."""
    pools: dict[str, PoolUse] = {}
    for w in per_worker:
        if w.state != WorkerState.ALIVE:
            continue
        pool = pools.setdefault(w.pool, PoolUse(pool=w.pool, workers=0, capacity=dict.fromkeys(RESOURCES, 0.0),
                                                used=dict.fromkeys(RESOURCES, 0.0)))
        pool.workers += 1
        for k in RESOURCES:
            pool.capacity[k] += w.capacity[k]
            pool.used[k] += w.used[k]
    return sorted(pools.values(), key=lambda p: p.pool)


async def _queue(connection: AsyncConnection, now: float) -> list[QueueStat]:
    pool = jobs.c.get("pool")
    columns = [jobs.c.id, jobs.c.created_at, func.count().label("n")] + ([pool] if pool is not None else [])
    waiting = (await connection.execute(
        select(*columns).select_from(tasks.join(jobs, tasks.c.job_id == jobs.c.id))
        .where(tasks.c.state == TaskState.PENDING, jobs.c.state.not_in([str(s) for s in JOB_TERMINAL]))
        .group_by(*[c for c in columns if c.name != "n"]))).all()
    stats: dict[str, list] = defaultdict(lambda: [0, 0, now])
    for row in waiting:
        stat = stats[job_pool(row)]
        stat[0] += 1
        stat[1] += row.n
        stat[2] = min(stat[2], row.created_at)
    return [QueueStat(pool=p, jobs=j, tasks=t, oldest_seconds=max(0.0, now - oldest))
            for p, (j, t, oldest) in sorted(stats.items())]
