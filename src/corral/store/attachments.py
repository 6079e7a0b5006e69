"""The attachments table: channels clients open into running tasks through the relay, and their history rows.

A row is written `opening` when a client connects, marked `open` when the worker dials back, and `closed` (or
`failed`, when it never paired) when either side ends. Each row's opening and ending are also history rows of
its job (task.attached, task.detached: corral.core.events), so `corral info` and the event stream tell who
reached into a task, how, from where, and for how long.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.relay import ChannelKind
from corral.store.schema import attachments, history, jobs, tasks, workers

LIVE = ("opening", "open")
MAX_LISTED = 1000


@dataclass(frozen=True)
class Target:
    """A task as a channel into it needs it: its current attempt, where it runs, and what kind of job it is."""

    job_id: int
    interactive: bool
    task_id: int
    index: int
    state: str
    attempt: int
    worker_id: str | None
    worker_state: str | None


@dataclass(frozen=True)
class Opening:
    session: str
    target: Target
    kind: ChannelKind
    detail: dict
    actor: str
    address: str | None


async def job_exists(connection: AsyncConnection, job_id: int) -> bool:
    return (await connection.execute(select(jobs.c.id).where(jobs.c.id == job_id))).first() is not None


async def read_target(connection: AsyncConnection, job_id: int, index: int) -> Target | None:
    """Task `index` of job `job_id`, or None when there is none."""
    row = (await connection.execute(
        select(tasks.c.job_id, jobs.c.spec, tasks.c.id, tasks.c.index, tasks.c.state, tasks.c.attempt,
               tasks.c.worker_id, workers.c.state.label("worker_state"))
        .select_from(tasks.join(jobs, tasks.c.job_id == jobs.c.id)
                     .outerjoin(workers, tasks.c.worker_id == workers.c.id))
        .where(tasks.c.job_id == job_id, tasks.c.index == index)
    )).first()
    if row is None:
        return None
    return Target(job_id=row.job_id, interactive=bool(row.spec.get("interactive")), task_id=row.id, index=row.index,
                  state=row.state, attempt=row.attempt, worker_id=row.worker_id, worker_state=row.worker_state)


async def open_attachment(connection: AsyncConnection, opening: Opening, now: float) -> int:
    """Record a channel a client asked for (state `opening`), with its history row; its id."""
    target = opening.target
    attachment_id = (await connection.execute(insert(attachments).values(
        session=opening.session, job_id=target.job_id, task_id=target.task_id, task_index=target.index,
        attempt=target.attempt, worker_id=target.worker_id, kind=opening.kind, detail=opening.detail,
        actor=opening.actor, address=opening.address, state="opening", opened_at=now,
    ))).inserted_primary_key[0]
    await _record(connection, "Attach", target.job_id, target.task_id, target.attempt, target.worker_id, now,
                  f"{opening.actor} opened {describe(opening.kind, opening.detail)} into task {target.index} "
                  f"from {opening.address or 'an unknown address'} (attachment {attachment_id})")
    return attachment_id


async def mark_open(connection: AsyncConnection, session: str, now: float) -> bool:
    """The worker dialed back: the channel is open. False when it was no longer opening (ended meanwhile)."""
    result = await connection.execute(update(attachments).where(
        attachments.c.session == session, attachments.c.state == "opening").values(state="open", connected_at=now))
    return result.rowcount == 1


async def mark_ended(connection: AsyncConnection, session: str, code: int, reason: str, now: float) -> bool:
    """The channel ended: `closed` once it had paired, `failed` if it never did; with its history row. False when
    it had already ended."""
    row = (await connection.execute(select(attachments).where(
        attachments.c.session == session, attachments.c.state.in_(LIVE)))).first()
    if row is None:
        return False
    state = "closed" if row.state == "open" else "failed"
    await connection.execute(update(attachments).where(attachments.c.id == row.id, attachments.c.state == row.state)
                             .values(state=state, closed_at=now, close_code=code, close_reason=reason))
    await _record(connection, "Detach", row.job_id, row.task_id, row.attempt, row.worker_id, now,
                  _ending(row, state, code, reason, now), result="SUCCESS" if state == "closed" else "FAILED")
    return True


async def fresh_openings(connection: AsyncConnection, worker_id: str, opened_after: float) -> list:
    """The worker's channels still waiting for it to dial back, opened after `opened_after`, oldest first."""
    return list((await connection.execute(
        select(attachments.c.session, attachments.c.task_id, attachments.c.attempt, attachments.c.kind,
               attachments.c.detail)
        .where(attachments.c.worker_id == worker_id, attachments.c.state == "opening",
               attachments.c.opened_at > opened_after)
        .order_by(attachments.c.id)
    )).all())


async def job_attachments(connection: AsyncConnection, job_id: int, limit: int) -> list:
    """A job's attachments, newest first, at most `limit` (up to MAX_LISTED)."""
    return list((await connection.execute(
        select(attachments).where(attachments.c.job_id == job_id)
        .order_by(attachments.c.id.desc()).limit(min(limit, MAX_LISTED))
    )).all())


async def close_live(connection: AsyncConnection, reason: str, code: int, now: float, *,
                     held_by: Collection[str | None]) -> int:
    """End every opening or open row whose client end was held by one of `held_by` (a controller's URL, as the
    row's detail names it; None: a row naming none, opened where one controller serves the store): its relay lived
    in that controller's memory, and the controller is gone or restarted. How many."""
    rows = (await connection.execute(
        select(attachments.c.session, attachments.c.detail).where(attachments.c.state.in_(LIVE)))).all()
    sessions = [row.session for row in rows if (row.detail or {}).get("url") in held_by]
    for session in sessions:
        await mark_ended(connection, session, code, reason, now)
    return len(sessions)


async def live_relay_holders(connection: AsyncConnection) -> set[str | None]:
    """The controllers (URLs; None: unnamed) holding the client ends of live channels."""
    rows = (await connection.execute(select(attachments.c.detail).where(attachments.c.state.in_(LIVE)))).scalars()
    return {(detail or {}).get("url") for detail in rows}


def describe(kind: str, detail: dict) -> str:
    """A channel as a person names it: `a terminal`, `exec of 'sh -c ...'`, `port 8888`."""
    if kind == "terminal":
        return "a watching terminal" if detail.get("watch") else "a terminal"
    if kind == "exec":
        shown = " ".join(detail.get("command") or [])
        return f"exec of {shown[:200]!r}" + (" (detached)" if detail.get("detach") else "")
    return f"port {detail.get('port')}"


def _ending(row, state: str, code: int, reason: str, now: float) -> str:
    said = f"{code}" + (f" {reason}" if reason else "")
    if state == "failed":
        return f"{row.actor}'s {describe(row.kind, row.detail)} into task {row.task_index} never opened: {said}"
    lasted = now - (row.connected_at or row.opened_at)
    return (f"{row.actor}'s {describe(row.kind, row.detail)} into task {row.task_index} closed after {lasted:.1f}s: "
            f"{said}")


async def _record(connection: AsyncConnection, handler: str, job_id: int, task_id: int, attempt: int,
                  worker_id: str | None, now: float, message: str, result: str = "SUCCESS") -> None:
    await connection.execute(insert(history).values(
        at=now, job_id=job_id, task_id=task_id, attempt=attempt, handler=handler, result=result,
        worker_id=worker_id, message=message))
