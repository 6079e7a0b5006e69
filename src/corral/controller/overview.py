"""The cluster at a glance: counts by state, capacity and use per pool, and the queue, read in one go.

The same summary feeds the dashboard's overview, the scrape-time gauges of /metrics and the
samples behind the overview's charts, so the three always agree.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import TYPE_CHECKING

from pydantic import BaseModel

from corral.core.states import WorkerState
from corral.store.overview import jobs_by_state, tasks_by_state, waiting_jobs
from corral.store.workers import held_by_worker, worker_rows

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

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
    job_counts = await jobs_by_state(connection)
    task_counts = await tasks_by_state(connection)
    workers = await worker_rows(connection)
    use = await held_by_worker(connection)
    per_worker = []
    for w in workers:
        u = use.get(w.id)
        per_worker.append(WorkerUse(
            id=w.id, name=w.name, pool=worker_pool(w), state=w.state,
            capacity={"cpu": w.cpu, "memory": w.memory, "gpu": w.gpu},
            used={k: float(getattr(u, k) or 0) if u else 0.0 for k in RESOURCES}, tasks=u.n if u else 0))
    return ClusterSummary(
        at=now, jobs=job_counts, tasks=task_counts,
        workers=dict(Counter(w.state for w in workers)),
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
    waiting = await waiting_jobs(connection)
    stats: dict[str, list] = defaultdict(lambda: [0, 0, now])
    for row in waiting:
        stat = stats[job_pool(row)]
        stat[0] += 1
        stat[1] += row.n
        stat[2] = min(stat[2], row.created_at)
    return [QueueStat(pool=p, jobs=j, tasks=t, oldest_seconds=max(0.0, now - oldest))
            for p, (j, t, oldest) in sorted(stats.items())]
