"""Creating a job: its row, one row per task, and the first history record, in one transaction."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

from sqlalchemy import Column, Connection, insert
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.spec import JobSpec
from corral.core.states import JobState, TaskState
from corral.store.inserts import INSERT_HISTORY
from corral.store.schema import jobs, tasks


@dataclass(frozen=True)
class NewJob:
    """A job to create. `name` overrides the spec's (a launched job's carries its launcher's as a prefix);
    `columns`: further job columns (a retry's chain columns); `created_by` and `note` head its history."""

    spec: JobSpec
    idempotency_key: str | None = None
    name: str | None = None
    launched_by: int | None = None
    created_by: str = "Submit"
    note: str | None = None
    columns: Mapping[str, Any] = field(default_factory=dict)


async def insert_job(connection: AsyncConnection, spec: JobSpec, idempotency_key: str | None, now: float, *,
                     name: str | None = None, launched_by: int | None = None, created_by: str = "Submit",
                     note: str | None = None, **columns) -> int:
    """One job, as `insert_jobs` makes many."""
    new = NewJob(spec, idempotency_key, name, launched_by, created_by, note, columns)
    return (await insert_jobs(connection, [new], now))[0]


# Jobs' rows, their values bound at each execution: building the statement of its thirty values and its cache key
# cost five times what running it does. Rows of the same columns go in one INSERT ... RETURNING (SQLAlchemy's
# "insertmanyvalues"). On PostgreSQL SQLAlchemy returns their ids in the rows' order; on SQLite, asked for that order,
# it would run one statement a row, so there the ids are taken unordered and sorted: SQLite numbers the rows of a
# multi-row VALUES one after the other in their order, each the largest id so far plus one.
_INSERT_JOBS = insert(jobs).returning(jobs.c.id)
_INSERT_JOBS_IN_ORDER = insert(jobs).returning(jobs.c.id, sort_by_parameter_order=True)
# Their tasks' statement, made once (and their first history records' in `inserts`): a statement made anew at each
# execution has its cache key worked out again each time.
_INSERT_TASKS = insert(tasks)


async def insert_jobs(connection: AsyncConnection, new: Sequence[NewJob], now: float) -> list[int]:
    """The jobs' rows (their ids, in order), then every task row of them in one statement and every first
    history record in another: a batch costs three statements, not three a job."""
    return await insert_jobs_at(connection, [(job, now) for job in new])


async def insert_jobs_at(connection: AsyncConnection, dated: Sequence[tuple[NewJob, float]]) -> list[int]:
    """As `insert_jobs`, each job created at its own time: the jobs of several calls written together."""
    return [row["id"] for row in await insert_job_rows_at(connection, dated)]


async def insert_job_rows_at(connection: AsyncConnection,
                             dated: Sequence[tuple[NewJob, float]]) -> list[dict[str, Any]]:
    """As `insert_jobs_at`: the columns written for each job, its id among them (what `written_job_row` completes
    for a reply, rather than made again)."""
    return await connection.run_sync(write_job_rows, dated)


def write_job_rows(connection: Connection, dated: Sequence[tuple[NewJob, float]]) -> list[dict[str, Any]]:
    """As `insert_job_rows_at`, on the connection's synchronous side: its statements run in the one greenlet
    SQLAlchemy's asyncio layer spawns for `run_sync`, rather than one spawned for each statement."""
    rows = [new_job_columns(job, now) for job, now in dated]
    ids = []
    for run in _same_columns(rows):
        ids += _job_ids(connection, run)
    if not ids:
        return []
    connection.execute(_INSERT_TASKS, [
        dict(job_id=job_id, index=i, state=TaskState.PENDING, state_since=now, attempt=0, tries=0, failures=0,
             preemptions=0, gpu_ids=[], cpu=job.spec.resources.cpu, memory=job.spec.resources.memory,
             gpu=job.spec.resources.gpu)
        for job_id, (job, now) in zip(ids, dated, strict=True) for i in range(job.spec.replicas)
    ])
    connection.execute(INSERT_HISTORY, [
        dict(at=now, job_id=job_id, handler=job.created_by, result="SUCCESS", to_state=JobState.PENDING,
             event="job.submitted", message=job.note or _submitted(job))
        for job_id, (job, now) in zip(ids, dated, strict=True)
    ])
    return [{**row, "id": job_id} for row, job_id in zip(rows, ids, strict=True)]


def _same_columns(rows: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """The rows in runs of alike columns (a job under a retry policy has columns the others leave out), in order."""
    return (list(run) for _, run in groupby(rows, key=dict.keys))


def _job_ids(connection: Connection, rows: list[dict[str, Any]]) -> list[int]:
    """The rows (all of the same columns) inserted, their ids in the rows' order."""
    if connection.dialect.name == "sqlite":
        return sorted(connection.execute(_INSERT_JOBS, rows).scalars())
    return list(connection.execute(_INSERT_JOBS_IN_ORDER, rows).scalars())


def new_job_columns(job: NewJob, now: float) -> dict[str, Any]:
    """The columns `insert_jobs` writes for the job (its id aside): what its reply is built from, too."""
    return dict(
        name=job.name or job.spec.name, spec=job.spec.model_dump(mode="json"), state=JobState.PENDING,
        gang=job.spec.gang, priority=job.spec.priority, replicas=job.spec.replicas,
        max_task_failures=job.spec.max_task_failures, max_retries_failure=job.spec.max_retries_failure,
        max_retries_preemption=job.spec.max_retries_preemption, scheduling_timeout=job.spec.scheduling_timeout,
        grace_period=job.spec.grace_period, cancelled=False, tries=0, idempotency_key=job.idempotency_key,
        created_at=now, state_since=now, launched_by=job.launched_by, **job.columns)


def written_job_row(written: dict[str, Any]) -> dict[str, Any]:
    """A job's row as `insert_job_rows_at` just wrote it (given what it returned), every column there (the schema's
    defaults where it wrote none), without reading it back."""
    return {**NEW_ROW_DEFAULTS, **written}


def _default(column: Column) -> Any:
    if column.default is not None:
        return column.default.arg
    return None if column.server_default is None else column.server_default.arg


NEW_ROW_DEFAULTS = {column.name: _default(column) for column in jobs.columns}


def _submitted(job: NewJob) -> str:
    return (f"{job.spec.replicas} task(s){', gang' if job.spec.gang else ''}"
            + (f", launched by job {job.launched_by}" if job.launched_by else ""))
