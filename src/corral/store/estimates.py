"""Start estimates in the store: the latest per pending job, the record of those made, and what they are learned from.

The estimator (corral.engine.estimates) rewrites only the estimates that moved past the noise, so a
queue that does not change costs a read and no write; each that moved is also recorded, and once its
job starts every open record of it gets the start, so its error can be reported by horizon.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from sqlalchemy import bindparam, delete, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.estimates import Settled
from corral.core.states import JobState, TaskState
from corral.scheduling.durations import Run, command_name
from corral.scheduling.policy import DEFAULT_PROJECT
from corral.store.cluster_state import put_setting
from corral.store.schema import attempts, cluster_settings, estimate_records, history, jobs, start_estimates, tasks

RUNS_READ = 5_000  # the latest finished attempts the duration model learns from
FINISHED = (str(TaskState.SUCCEEDED), str(TaskState.FAILED))  # attempts that ran to their own end
ESTIMATOR = "EstimateStarts"  # the history rows it writes, and its handler lock
CHUNK = 5_000  # job ids per statement
ESTIMATED_AT = "estimated_at"  # the cluster setting: when the last pass wrote


@dataclass(frozen=True)
class StoredEstimate:
    job_id: int
    made_at: float
    start_at: float | None
    all_started_at: float | None = None
    after_job: int | None = None
    basis: str = ""
    unknown: str | None = None
    never: bool = False


@dataclass(frozen=True)
class JobDurationFacts:
    """What a job's expected duration is looked up by."""

    name: str  # its command name (corral.scheduling.durations.command_name)
    project: str
    time_limit: float | None


async def finished_runs(connection: AsyncConnection, limit: int = RUNS_READ) -> list[Run]:
    """The latest attempts that ran to their own end, oldest first."""
    query = (select(jobs.c.name, jobs.c.spec, tasks.c.cpu, tasks.c.memory, tasks.c.gpu, attempts.c.started_at,
                    attempts.c.finished_at)
             .select_from(attempts.join(tasks, tasks.c.id == attempts.c.task_id)
                          .join(jobs, jobs.c.id == tasks.c.job_id))
             .where(attempts.c.state.in_(FINISHED), attempts.c.started_at.is_not(None),
                    attempts.c.finished_at.is_not(None))
             .order_by(attempts.c.finished_at.desc()).limit(limit))
    rows = (await connection.execute(query)).all()
    return [Run(_project(row.spec), _command(row.name, row.spec), (row.cpu, row.memory, row.gpu),
                row.finished_at - row.started_at) for row in reversed(rows)]


async def duration_facts(connection: AsyncConnection, job_ids: Collection[int]) -> dict[int, JobDurationFacts]:
    facts: dict[int, JobDurationFacts] = {}
    for some in _chunks(list(job_ids)):
        rows = await connection.execute(select(jobs.c.id, jobs.c.name, jobs.c.spec).where(jobs.c.id.in_(some)))
        facts.update((row.id, JobDurationFacts(_command(row.name, row.spec), _project(row.spec),
                                               _time_limit(row.spec))) for row in rows)
    return facts


async def estimated_at(connection: AsyncConnection) -> float | None:
    """When the last pass wrote (any controller's): another sooner than its period after it is not needed."""
    value = (await connection.execute(select(cluster_settings.c.value)
                                      .where(cluster_settings.c.name == ESTIMATED_AT))).scalar()
    return float(value) if value is not None else None


async def any_estimates(connection: AsyncConnection) -> bool:
    """Whether any start estimate is stored: a pass with nothing pending still has these to clear."""
    return (await connection.execute(select(start_estimates.c.job_id).limit(1))).first() is not None


async def mark_estimated(connection: AsyncConnection, now: float) -> None:
    await put_setting(connection, ESTIMATED_AT, repr(now))


async def read_estimates(connection: AsyncConnection,
                         job_ids: Collection[int] | None = None) -> dict[int, StoredEstimate]:
    query = select(start_estimates)
    if job_ids is not None:
        query = query.where(start_estimates.c.job_id.in_(list(job_ids)))
    return {row.job_id: StoredEstimate(row.job_id, row.made_at, row.start_at, row.all_started_at, row.after_job,
                                       row.basis, row.unknown, row.never)
            for row in await connection.execute(query)}


async def write_estimates(connection: AsyncConnection, changed: Collection[StoredEstimate],
                          recorded: Collection[StoredEstimate]) -> None:
    """Replace the estimates that moved; record those whose start moved (a known start only)."""
    for some in _chunks(list(changed)):
        await connection.execute(delete(start_estimates).where(
            start_estimates.c.job_id.in_([e.job_id for e in some])))
        await connection.execute(insert(start_estimates), [_columns(e) for e in some])
    if recorded:
        await connection.execute(insert(estimate_records), [
            dict(job_id=e.job_id, made_at=e.made_at, start_at=e.start_at) for e in recorded])


async def note_moved(connection: AsyncConnection, moves: Mapping[int, str], now: float) -> None:
    """A history row per job whose estimate moved past the notification factor (job.estimate_moved)."""
    if moves:
        await connection.execute(insert(history), [
            dict(at=now, job_id=job_id, handler=ESTIMATOR, result="MOVED", message=message)
            for job_id, message in moves.items()])


async def settle(connection: AsyncConnection) -> list[Settled]:
    """Jobs with an estimate that are no longer pending: their latest estimate goes; each open record of one that
    started gets its start (its first placement since the record was made). Returns the records settled."""
    gone = [job_id for job_id, in await connection.execute(
        select(start_estimates.c.job_id)
        .select_from(start_estimates.outerjoin(jobs, jobs.c.id == start_estimates.c.job_id))
        .where(or_(jobs.c.id.is_(None), jobs.c.state != str(JobState.PENDING))))]
    settled: list[Settled] = []
    for some in _chunks(gone):
        settled += await _settle(connection, some)
    return settled


async def _settle(connection: AsyncConnection, gone: list[int]) -> list[Settled]:
    await connection.execute(delete(start_estimates).where(start_estimates.c.job_id.in_(gone)))
    open_records = (await connection.execute(
        select(estimate_records.c.id, estimate_records.c.job_id, estimate_records.c.made_at,
               estimate_records.c.start_at)
        .where(estimate_records.c.job_id.in_(gone), estimate_records.c.started_at.is_(None)))).all()
    if not open_records:
        return []
    placements: dict[int, list[float]] = {}
    for job_id, assigned_at in await connection.execute(
            select(tasks.c.job_id, attempts.c.assigned_at)
            .select_from(attempts.join(tasks, tasks.c.id == attempts.c.task_id))
            .where(tasks.c.job_id.in_(gone), attempts.c.assigned_at.is_not(None))):
        placements.setdefault(job_id, []).append(assigned_at)
    settled: list[Settled] = []
    started_at: dict[int, float] = {}
    for record in open_records:
        started = min((at for at in placements.get(record.job_id, ()) if at >= record.made_at), default=None)
        if started is not None:
            started_at[record.id] = started
            settled.append(Settled(record.made_at, record.start_at, started))
    unstarted = [record.id for record in open_records if record.id not in started_at]
    if unstarted:  # cancelled, or doomed, before it started: nothing to hold the records to
        await connection.execute(delete(estimate_records).where(estimate_records.c.id.in_(unstarted)))
    if started_at:
        await connection.execute(
            update(estimate_records).where(estimate_records.c.id == bindparam("record"))
            .values(started_at=bindparam("started")),
            [{"record": record, "started": at} for record, at in started_at.items()])
    return settled


async def prune_records(connection: AsyncConnection, started_before: float) -> None:
    """Forget the records of jobs started before `started_before`: the store does not grow with every estimate."""
    await connection.execute(delete(estimate_records).where(estimate_records.c.started_at < started_before))


async def settled_since(connection: AsyncConnection, since: float) -> list[Settled]:
    rows = await connection.execute(
        select(estimate_records.c.made_at, estimate_records.c.start_at, estimate_records.c.started_at)
        .where(estimate_records.c.started_at >= since))
    return [Settled(row.made_at, row.start_at, row.started_at) for row in rows]


def _chunks(items: list) -> list[list]:
    """Lists short enough for one IN (...) on every store (SQLite binds at most 32,766 values a statement)."""
    return [items[i:i + CHUNK] for i in range(0, len(items), CHUNK)]


def _columns(estimate: StoredEstimate) -> dict:
    return dict(job_id=estimate.job_id, made_at=estimate.made_at, start_at=estimate.start_at,
                all_started_at=estimate.all_started_at, after_job=estimate.after_job, basis=estimate.basis,
                unknown=estimate.unknown, never=estimate.never)


def _command(name: str, spec) -> str:
    return command_name(name, (spec or {}).get("command") or ())


def _project(spec) -> str:
    return (spec or {}).get("project") or DEFAULT_PROJECT


def _time_limit(spec) -> float | None:
    limit = (spec or {}).get("time_limit")
    return float(limit) if limit else None
