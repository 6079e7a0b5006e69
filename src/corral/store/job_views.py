"""What the job API and the dashboard read about jobs: pages of the job list, job rows with their task
counts, a job's tasks, attempts and history, and the queue of jobs waiting to be placed.

The dashboard pages 100k jobs by offset in any order it offers; the CLI pages newest first by
cursor. Project and pool live in the job's spec, and are filtered there.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy import Select, bindparam, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.states import JOB_TERMINAL, JobState, TaskState
from corral.store.launches import subtree_ids
from corral.store.schema import attempts, history, jobs, tasks

SortKey = Literal["id", "name", "state", "priority", "created_at", "state_since"]

# The order in which ScheduleJobs considers waiting jobs (its targets are read in this order).
QUEUE_ORDER = (jobs.c.id.asc(),)


@dataclass(frozen=True)
class JobFilter:
    states: list[JobState] = field(default_factory=list)
    name: str | None = None  # a case-insensitive part of the name
    project: str | None = None
    pool: str | None = None
    launched_by: int | None = None
    within: int | None = None  # only this job and those launched from it (what a task may see)
    owner: str | None = None
    projects: Collection[str] | None = None  # only jobs of these projects (what the caller may read); None: all

    def apply(self, query: Select) -> Select:
        if self.within is not None:
            query = query.where(jobs.c.id.in_(subtree_ids(self.within)))
        if self.owner is not None:
            query = query.where(jobs.c.owner == self.owner)
        if self.projects is not None:
            query = query.where(jobs.c.spec["project"].as_string().in_(sorted(self.projects)))
        if self.launched_by is not None:
            query = query.where(jobs.c.launched_by == self.launched_by)
        if self.states:
            query = query.where(jobs.c.state.in_([str(s) for s in self.states]))
        if self.name:
            escaped = self.name.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            query = query.where(jobs.c.name.ilike(f"%{escaped}%", escape="\\"))
        for field_name, value in (("project", self.project), ("pool", self.pool)):
            if value is not None:  # kept in the spec only: read from its JSON (a scan, as the name filter is)
                query = query.where(jobs.c.spec[field_name].as_string() == value)
        return query


async def page_ids(connection: AsyncConnection, where: JobFilter, sort: SortKey, descending: bool, limit: int,
                   offset: int, cursor: int | None) -> list[int]:
    """Ids of one page (one more than `limit`, to tell whether another page follows)."""
    column = jobs.c[sort]
    order = [column.desc() if descending else column.asc()]
    if sort != "id":
        order.append(jobs.c.id.desc() if descending else jobs.c.id.asc())  # a stable order among equals
    query = where.apply(select(jobs.c.id)).order_by(*order).limit(limit + 1).offset(offset)
    if cursor is not None:
        query = query.where(jobs.c.id < cursor if descending else jobs.c.id > cursor)
    return list((await connection.execute(query)).scalars())


async def count_jobs(connection: AsyncConnection, where: JobFilter) -> int:
    return (await connection.execute(where.apply(select(func.count()).select_from(jobs)))).scalar_one()


# The reads of every request about a job, built once with their values bound at each execution: building a
# statement and its cache key costs three times what running it does on a small read.
_JOB_ROWS = select(jobs).where(jobs.c.id.in_(bindparam("ids", expanding=True)))
_JOB_ROW = select(jobs).where(jobs.c.id == bindparam("job_id"))
# A row per job and state of its tasks (grouped by the job's key, so its other columns are the job's own).
_JOBS_WITH_TASK_COUNTS = (
    select(jobs, tasks.c.state.label("task_state"), func.count(tasks.c.id).label("task_count"))
    .select_from(jobs.outerjoin(tasks, tasks.c.job_id == jobs.c.id))
    .where(jobs.c.id.in_(bindparam("ids", expanding=True))).group_by(jobs.c.id, tasks.c.state))


async def job_rows(connection: AsyncConnection, ids: Collection[int]) -> dict[int, Any]:
    """Full `jobs` rows by id; ids with no job are left out."""
    return {r.id: r for r in (await connection.execute(_JOB_ROWS, {"ids": list(ids)})).all()}


async def job_row(connection: AsyncConnection, job_id: int):
    """The full `jobs` row, or None."""
    return (await connection.execute(_JOB_ROW, {"job_id": job_id})).first()


async def existing_job_ids(connection: AsyncConnection, ids: Collection[int]) -> set[int]:
    return set((await connection.execute(select(jobs.c.id).where(jobs.c.id.in_(ids)))).scalars())


async def job_exists(connection: AsyncConnection, job_id: int) -> bool:
    return (await connection.execute(select(jobs.c.id).where(jobs.c.id == job_id))).first() is not None


async def job_id_by_key(connection: AsyncConnection, key: str) -> int | None:
    """The job submitted with this idempotency key, if any."""
    return (await connection.execute(select(jobs.c.id).where(jobs.c.idempotency_key == key))).scalar()


async def jobs_with_task_counts(connection: AsyncConnection,
                                ids: Collection[int]) -> tuple[dict[int, Any], dict[int, dict[str, int]]]:
    """Full `jobs` rows by id (ids with no job left out), and for each job how many of its tasks are in each state
    (jobs without tasks get an empty dict): one statement, where a job's view took two round trips to the store."""
    rows: dict[int, Any] = {}
    counts: dict[int, dict[str, int]] = defaultdict(dict)
    for r in (await connection.execute(_JOBS_WITH_TASK_COUNTS, {"ids": list(ids)})).all():
        rows.setdefault(r.id, r)
        if r.task_state is not None:
            counts[r.id][r.task_state] = r.task_count
    return rows, counts


async def task_rows(connection: AsyncConnection, job_id: int) -> list:
    """Full `tasks` rows of the job, by index."""
    return list((await connection.execute(
        select(tasks).where(tasks.c.job_id == job_id).order_by(tasks.c.index))).all())


async def task_ids_of(connection: AsyncConnection, job_id: int) -> list[int]:
    return list((await connection.execute(select(tasks.c.id).where(tasks.c.job_id == job_id))).scalars())


async def attempt_rows(connection: AsyncConnection, task_ids: Sequence[int]) -> list:
    """Full `attempts` rows of these tasks, by task and attempt."""
    return list((await connection.execute(
        select(attempts).where(attempts.c.task_id.in_(task_ids))
        .order_by(attempts.c.task_id, attempts.c.attempt))).all())


async def history_rows(connection: AsyncConnection, job_id: int) -> list:
    """The job's history, oldest first, each record with the index of its task (None for the job's own)."""
    return list((await connection.execute(
        select(history, tasks.c.index.label("task_index"))
        .select_from(history.outerjoin(tasks, history.c.task_id == tasks.c.id))
        .where(history.c.job_id == job_id).order_by(history.c.id))).all())


def _waiting() -> Select:
    """Jobs not ended with tasks waiting to be placed: (id, waiting)."""
    return (
        select(jobs.c.id, func.count().label("waiting"))
        .select_from(tasks.join(jobs, tasks.c.job_id == jobs.c.id))
        .where(tasks.c.state == TaskState.PENDING, jobs.c.state.not_in([str(s) for s in JOB_TERMINAL]))
        .group_by(jobs.c.id)
    )


async def queue_page(connection: AsyncConnection, limit: int, offset: int,
                     projects: Collection[str] | None = None) -> tuple[list, int]:
    """One page of the waiting jobs, (id, waiting, position) in the order the scheduler considers them, and their
    total; with `projects`, only those projects' jobs, each at its position in the whole queue."""
    ranked = _waiting().add_columns(func.row_number().over(order_by=QUEUE_ORDER).label("position"),
                                    jobs.c.spec["project"].as_string().label("project")).subquery()
    waiting = select(ranked.c.id, ranked.c.waiting, ranked.c.position)
    if projects is not None:
        waiting = waiting.where(ranked.c.project.in_(sorted(projects)))
    rows = list((await connection.execute(waiting.order_by(ranked.c.position).limit(limit).offset(offset))).all())
    total = (await connection.execute(select(func.count()).select_from(waiting.subquery()))).scalar_one()
    return rows, total
