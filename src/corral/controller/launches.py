"""Jobs submitted from inside a task: their names, and whether their launcher may still launch."""

from __future__ import annotations

from fastapi import HTTPException, status
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.states import JOB_TERMINAL, JobState
from corral.store.schema import jobs

NAME_LIMIT = 200  # the width of jobs.name


async def launch_name(connection: AsyncConnection, launcher: int | None, name: str) -> str:
    """`launcher-name/name` for a launched job (names read as a path down the launch tree).

    A launcher that is ending can launch nothing: its children would be cancelled at once.
    """
    if launcher is None:
        return name
    row = (await connection.execute(
        select(jobs.c.name, jobs.c.state, jobs.c.cancelled).where(jobs.c.id == launcher))).first()
    if row is None:
        raise HTTPException(status.HTTP_409_CONFLICT, f"job {launcher} no longer exists; it cannot launch jobs")
    if JobState(row.state) in JOB_TERMINAL or row.state == JobState.TERMINATING:
        raise HTTPException(status.HTTP_409_CONFLICT,
                            f"job {launcher} is {row.state}{' (cancelled)' if row.cancelled else ''}; "
                            "an ending job cannot launch jobs")
    return f"{row.name}/{name}"[:NAME_LIMIT]
