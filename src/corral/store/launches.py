"""The launch tree: which jobs a job's tasks submitted, and theirs, through `jobs.launched_by`."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.store.schema import jobs

MAX_DEPTH = 1000  # a launch chain deeper than this is refused rather than walked forever


async def launched_within(connection: AsyncConnection, job_id: int, root: int) -> bool | None:
    """Whether `job_id` is `root` or was launched, at any depth, from `root`; None if there is no such job."""
    current: int | None = job_id
    for _ in range(MAX_DEPTH):
        if current == root:
            return True
        row = (await connection.execute(select(jobs.c.launched_by).where(jobs.c.id == current))).first()
        if row is None:
            return None if current == job_id else False
        current = row.launched_by
        if current is None:
            return False
    return False


def subtree_ids(root: int):
    """A select of `root` and every job launched from it, at any depth (one recursive query)."""
    tree = select(jobs.c.id).where(jobs.c.id == root).cte("tree", recursive=True)
    tree = tree.union_all(select(jobs.c.id).where(jobs.c.launched_by == tree.c.id))
    return select(tree.c.id)


async def launcher_row(connection: AsyncConnection, launcher: int):
    """The (name, state, cancelled, priority, spec) of a job that submits another, or None."""
    return (await connection.execute(
        select(jobs.c.name, jobs.c.state, jobs.c.cancelled, jobs.c.priority, jobs.c.spec)
        .where(jobs.c.id == launcher))).first()
