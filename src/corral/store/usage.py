"""Usage sums: each attempt's reservation (its task's cores, bytes of memory and GPUs, a share as its share) times
the seconds it held it, from assigned to finished (a running attempt: to `running_end`), clipped to each bucket.

One query: attempts are summed per task and bucket first (in the order they are stored), then per job, so that a
task's reservation is read once per task and a job's project, pool and owner from its JSON spec once per job;
then per (key, pool, bucket). A deployment's replicas
are jobs of their own (replicas.job_id): their usage goes to the deployment's owner, in the replica job's project
and pool, which are the deployment's.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import ColumnElement, and_, case, false, func, literal_column, or_, select, union_all
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.usage import UsageBy, UsageSums, Visibility
from corral.store.schema import attempts, deployments, jobs, replicas, tasks


def _number(value: float) -> ColumnElement:
    """A number written into the SQL: PostgreSQL cannot type a bare parameter in a UNION's columns."""
    return literal_column(repr(value))


def _later(a: ColumnElement, b: ColumnElement) -> ColumnElement:
    return case((a > b, a), else_=b)


def _earlier(a: ColumnElement, b: ColumnElement) -> ColumnElement:
    return case((a < b, a), else_=b)


async def usage_sums(connection: AsyncConnection, by: UsageBy, buckets: Sequence[tuple[float, float]],
                     running_end: float, visible: Visibility | None = None) -> list[UsageSums]:
    """Usage per (key, pool, bucket index) over `buckets` ([start, end) windows, in order, not overlapping);
    `visible`: only what it lets its caller read (None: everything)."""
    rows = [select(_number(i).label("bucket"), _number(start).label("start"), _number(end).label("end"))
            for i, (start, end) in enumerate(buckets)]
    bounds = (union_all(*rows) if len(rows) > 1 else rows[0]).subquery("buckets")
    ended = func.coalesce(attempts.c.finished_at, _number(running_end))
    seconds = (_earlier(ended, bounds.c.end) - _later(attempts.c.assigned_at, bounds.c.start))
    per_task = (  # attempts are stored by task: summed there first, each task's reservation is read once
        select(attempts.c.task_id, bounds.c.bucket, func.count().label("attempts"), func.sum(seconds).label("seconds"))
        .select_from(attempts.join(bounds, and_(attempts.c.assigned_at < bounds.c.end, ended > bounds.c.start)))
        .where(attempts.c.assigned_at < buckets[-1][1], ended > buckets[0][0])
        .group_by(attempts.c.task_id, bounds.c.bucket)
    ).subquery("per_task")
    per_job = (
        select(tasks.c.job_id, per_task.c.bucket, func.sum(per_task.c.attempts).label("attempts"),
               func.sum(tasks.c.cpu * per_task.c.seconds).label("cpu"),
               func.sum(tasks.c.memory * per_task.c.seconds).label("memory"),
               func.sum(tasks.c.gpu * per_task.c.seconds).label("gpu"))
        .select_from(per_task.join(tasks, tasks.c.id == per_task.c.task_id))
        .group_by(tasks.c.job_id, per_task.c.bucket)
    ).subquery("per_job")
    named = (  # a job's project, pool and owner as columns, so that the grouping below names them, not JSON paths
        select(func.coalesce(jobs.c.spec["project"].as_string(), "default").label("project"),
               func.coalesce(jobs.c.spec["pool"].as_string(), "default").label("pool"),
               func.coalesce(deployments.c.owner, jobs.c.owner).label("owner"), per_job)
        .select_from(per_job.join(jobs, jobs.c.id == per_job.c.job_id)
                     .outerjoin(replicas, replicas.c.job_id == jobs.c.id)
                     .outerjoin(deployments, deployments.c.id == replicas.c.deployment_id))
    ).subquery("named")
    key = {UsageBy.PROJECT: named.c.project, UsageBy.USER: named.c.owner, UsageBy.POOL: named.c.pool}[by]
    query = (
        select(key.label("key"), named.c.pool, named.c.bucket, func.sum(named.c.attempts).label("attempts"),
               func.sum(named.c.cpu).label("cpu"), func.sum(named.c.memory).label("memory"),
               func.sum(named.c.gpu).label("gpu"))
        .group_by(key, named.c.pool, named.c.bucket)
    )
    if visible is not None:
        query = query.where(or_(
            named.c.project.in_(sorted(visible.projects)) if visible.projects else false(),
            and_(named.c.project.in_(sorted(visible.own_projects)), named.c.owner == visible.owner)
            if visible.own_projects else false()))
    return [UsageSums(key=r.key, pool=r.pool, bucket=r.bucket, attempts=int(r.attempts), cpu_seconds=float(r.cpu),
                      memory_byte_seconds=float(r.memory), gpu_seconds=float(r.gpu))
            for r in (await connection.execute(query)).all()]
