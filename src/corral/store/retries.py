"""The retry chain in the store: RetryJobs' targets, how their jobs ended, the chain, the policy defaults."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping

from sqlalchemy import Float, and_, bindparam, delete, func, insert, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.failure import JobEnd, TaskEnd
from corral.core.lifecycle import SchedulingResult
from corral.core.retries import RetryState, RetryTarget
from corral.core.retry_policy import RetryPolicy
from corral.core.states import JOB_TERMINAL, TASK_TERMINAL, JobState, TaskState
from corral.store.schema import attempts, history, jobs, retry_defaults, tasks

BATCH_JOBS = 1000  # a RetryJobs run takes at most this many jobs; the rest wait a pass

CLUSTER = ("cluster", "")


# Jobs RetryJobs has a decision to make about: armed ones that have ended, scheduled ones due by the `now` bound.
# Made once with `now` a parameter: every engine pass asks whether there are any (store.reads.present_and_retries),
# and SQLAlchemy neither builds the statement again nor walks it for its cache key (a statement keeps its key once
# made).
RETRY_WANTED = or_(
    and_(jobs.c.retry_state == RetryState.ARMED, jobs.c.state.in_([str(s) for s in JOB_TERMINAL])),
    and_(jobs.c.retry_state == RetryState.SCHEDULED, jobs.c.retry_due_at <= bindparam("now", type_=Float)),
)


async def retry_targets(connection: AsyncConnection, now: float,
                        unreadable: dict[int, str] | None = None) -> list[RetryTarget]:
    """Armed jobs that have ended and scheduled retries that are due (one query), with how the failed ones ended.

    A job whose retry policy cannot be read (a row from before a validation) is left out and noted in `unreadable`.
    """
    rows = (await connection.execute(
        select(jobs.c.id, jobs.c.state, jobs.c.cancelled, jobs.c.retry_state, jobs.c.retry_count,
               jobs.c.retry_policy, jobs.c.finished_at, jobs.c.retry_due_at)
        .where(RETRY_WANTED)
        .order_by(jobs.c.id).limit(BATCH_JOBS), {"now": now}
    )).all()
    policies = {}
    for row in rows:
        try:
            policies[row.id] = RetryPolicy.model_validate(row.retry_policy)
        except ValueError as error:
            if unreadable is not None:
                unreadable[row.id] = f"its retry policy cannot be read: {error}".replace("\n", " ")
    rows = [r for r in rows if r.id in policies]
    ended = [r.id for r in rows if r.retry_state == RetryState.ARMED and r.state != JobState.SUCCEEDED]
    task_ends = await _task_ends(connection, ended)
    expired = await _ended_by_expiry(connection, ended)
    return [
        RetryTarget(
            job_id=r.id, state=JobState(r.state), retry_state=RetryState(r.retry_state), retry_count=r.retry_count,
            policy=policies[r.id], finished_at=r.finished_at, due_at=r.retry_due_at,
            end=JobEnd(JobState(r.state), r.cancelled, tuple(task_ends[r.id]), r.id in expired)
            if r.retry_state == RetryState.ARMED else None)
        for r in rows
    ]


async def _task_ends(connection: AsyncConnection, job_ids: list[int]) -> dict[int, list[TaskEnd]]:
    """How the current attempt of each task ended: state, exit code, OOM kill, and the state it ended from."""
    ends: dict[int, list[TaskEnd]] = defaultdict(list)
    if not job_ids:
        return ends
    task_rows = (await connection.execute(
        select(tasks.c.id, tasks.c.job_id, tasks.c.state, tasks.c.attempt, tasks.c.exit_code,
               attempts.c.oom_killed, attempts.c.reason)
        .select_from(tasks.outerjoin(attempts, and_(attempts.c.task_id == tasks.c.id,
                                                    attempts.c.attempt == tasks.c.attempt)))
        .where(tasks.c.job_id.in_(job_ids)).order_by(tasks.c.job_id, tasks.c.index)
    )).all()
    terminal = [str(s) for s in TASK_TERMINAL]
    last = (
        select(history.c.task_id, func.max(history.c.id).label("id"))
        .where(history.c.job_id.in_(job_ids), history.c.task_id.is_not(None), history.c.to_state.in_(terminal))
        .group_by(history.c.task_id).subquery()
    )
    ended_from = dict((await connection.execute(
        select(history.c.task_id, history.c.from_state).join(last, history.c.id == last.c.id)
    )).all())
    for row in task_rows:
        source = ended_from.get(row.id)
        ends[row.job_id].append(TaskEnd(TaskState(row.state), TaskState(source) if source else None, row.exit_code,
                                        bool(row.oom_killed), row.reason))
    return ends


async def _ended_by_expiry(connection: AsyncConnection, job_ids: list[int]) -> set[int]:
    """Jobs whose move into their terminal state was a handler's EXPIRED outcome."""
    if not job_ids:
        return set()
    last = (
        select(func.max(history.c.id).label("id"))
        .where(history.c.job_id.in_(job_ids), history.c.task_id.is_(None),
               history.c.to_state.in_([str(s) for s in JOB_TERMINAL]))
        .group_by(history.c.job_id).subquery()
    )
    return set((await connection.execute(
        select(history.c.job_id).join(last, history.c.id == last.c.id)
        .where(history.c.result == SchedulingResult.EXPIRED)
    )).scalars())


async def next_due(connection: AsyncConnection) -> float | None:
    """When the earliest scheduled retry is due, so the engine can wake for it."""
    return (await connection.execute(
        select(func.min(jobs.c.retry_due_at)).where(jobs.c.retry_state == RetryState.SCHEDULED)
    )).scalar()


async def retry_parent(connection: AsyncConnection, job_id: int):
    """What a retry's child is made from: its parent's row, and the idempotency key of its chain's first job."""
    parent = (await connection.execute(
        select(jobs.c.id, jobs.c.name, jobs.c.spec, jobs.c.idempotency_key, jobs.c.retry_root_id, jobs.c.retry_count,
               jobs.c.max_retries, jobs.c.retry_policy, jobs.c.retry_cause, jobs.c.launched_by, jobs.c.owner)
        .where(jobs.c.id == job_id))).one()
    if parent.retry_root_id is None:
        return parent, parent.idempotency_key
    root_key = (await connection.execute(
        select(jobs.c.idempotency_key).where(jobs.c.id == parent.retry_root_id))).scalar()
    return parent, root_key


async def job_with_key(connection: AsyncConnection, key: str) -> int | None:
    return (await connection.execute(select(jobs.c.id).where(jobs.c.idempotency_key == key))).scalar()


async def retry_state_of(connection: AsyncConnection, job_id: int):
    """A job's state and retry state; None when there is no such job."""
    return (await connection.execute(select(jobs.c.state, jobs.c.retry_state).where(jobs.c.id == job_id))).first()


async def chain_ids(connection: AsyncConnection, job_ids: Collection[int]) -> dict[int, list[int]]:
    """For each job, the ids of its retry chain from the first job to the newest (its own included)."""
    rows = (await connection.execute(
        select(jobs.c.id, jobs.c.retry_root_id).where(jobs.c.id.in_(list(job_ids)))
    )).all()
    return await chains_from(connection, {r.id: r.retry_root_id or r.id for r in rows})


async def chains_from(connection: AsyncConnection, root_of: Mapping[int, int]) -> dict[int, list[int]]:
    """As `chain_ids`, for jobs whose chain roots the caller has read already (job id -> its root's id)."""
    members: dict[int, list[tuple[int, int]]] = defaultdict(list)
    roots = set(root_of.values())
    for row in (await connection.execute(
        select(jobs.c.id, jobs.c.retry_root_id, jobs.c.retry_count)
        .where(or_(jobs.c.id.in_(roots), jobs.c.retry_root_id.in_(roots)))
    )).all():
        members[row.retry_root_id or row.id].append((row.retry_count, row.id))
    return {job_id: [i for _, i in sorted(members[root])] for job_id, root in root_of.items()}


async def stored_default(connection: AsyncConnection, kind: str, name: str) -> RetryPolicy | None:
    policy = (await connection.execute(
        select(retry_defaults.c.policy).where(retry_defaults.c.kind == kind, retry_defaults.c.name == name)
    )).scalar()
    return None if policy is None else RetryPolicy.model_validate(policy)


async def stored_defaults(connection: AsyncConnection, keys: Collection[tuple[str, str]]
                          ) -> dict[tuple[str, str], RetryPolicy]:
    """The stored defaults of these (kind, name) keys, in one read; a key with none is left out."""
    rows = (await connection.execute(
        select(retry_defaults.c.kind, retry_defaults.c.name, retry_defaults.c.policy)
        .where(or_(*(and_(retry_defaults.c.kind == kind, retry_defaults.c.name == name) for kind, name in keys)))
    )).all()
    return {(r.kind, r.name): RetryPolicy.model_validate(r.policy) for r in rows}


async def store_default(connection: AsyncConnection, kind: str, name: str, policy: RetryPolicy | None,
                        now: float) -> None:
    """Set (or, with None, remove) a stored default."""
    await connection.execute(delete(retry_defaults).where(retry_defaults.c.kind == kind,
                                                          retry_defaults.c.name == name))
    if policy is not None:
        await connection.execute(insert(retry_defaults).values(
            kind=kind, name=name, policy=policy.model_dump(mode="json"), updated_at=now))
