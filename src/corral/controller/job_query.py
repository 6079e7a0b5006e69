"""The job list's filters and orders, turned into one query that pages on the server.

The dashboard pages 100k jobs by offset in any order it offers; the CLI pages newest first by
cursor. Project and pool live in the job's spec, and are filtered there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from sqlalchemy import Select, func, select

from corral.core.states import JobState
from corral.store.launches import subtree_ids
from corral.store.schema import jobs

SortKey = Literal["id", "name", "state", "priority", "created_at", "state_since"]


@dataclass(frozen=True)
class JobFilter:
    states: list[JobState] = field(default_factory=list)
    name: str | None = None  # a case-insensitive part of the name
    project: str | None = None
    pool: str | None = None
    launched_by: int | None = None
    within: int | None = None  # only this job and those launched from it (what a task may see)

    def apply(self, query: Select) -> Select:
        if self.within is not None:
            query = query.where(jobs.c.id.in_(subtree_ids(self.within)))
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


def page_query(where: JobFilter, sort: SortKey, descending: bool, limit: int, offset: int,
               cursor: int | None) -> Select:
    """Ids of one page (one more than `limit`, to tell whether another page follows)."""
    column = jobs.c[sort]
    order = [column.desc() if descending else column.asc()]
    if sort != "id":
        order.append(jobs.c.id.desc() if descending else jobs.c.id.asc())  # a stable order among equals
    query = where.apply(select(jobs.c.id)).order_by(*order).limit(limit + 1).offset(offset)
    if cursor is not None:
        query = query.where(jobs.c.id < cursor if descending else jobs.c.id > cursor)
    return query


def count_query(where: JobFilter) -> Select:
    return where.apply(select(func.count()).select_from(jobs))
