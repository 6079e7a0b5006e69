"""The audit log: rows appended for the API's mutating calls and the controller's own actions, read back by a
cluster admin, and pruned past their retention."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, Row, delete, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.store.inserts import INSERT_AUDIT
from corral.store.schema import audit


@dataclass(frozen=True)
class AuditFilter:
    """What a reader asks for: every field left None matches all rows."""

    actor: str | None = None
    action: str | None = None
    since: float | None = None  # at or after
    until: float | None = None  # before


async def add_audit(connection: AsyncConnection, records: list[dict]) -> None:
    if records:
        await connection.run_sync(write_audit, records)


def write_audit(connection: Connection, records: list[dict]) -> None:
    """The records written, on a connection's synchronous side (inside `run_sync`, with the statements beside it)."""
    if records:
        connection.execute(INSERT_AUDIT, records)


async def audit_rows(connection: AsyncConnection, wanted: AuditFilter, limit: int) -> Sequence[Row]:
    """At most `limit` rows that match `wanted`, newest first."""
    query = select(audit).order_by(audit.c.id.desc()).limit(limit)
    if wanted.actor is not None:
        query = query.where(audit.c.actor == wanted.actor)
    if wanted.action is not None:
        query = query.where(audit.c.action == wanted.action)
    if wanted.since is not None:
        query = query.where(audit.c.at >= wanted.since)
    if wanted.until is not None:
        query = query.where(audit.c.at < wanted.until)
    return (await connection.execute(query)).all()


async def prune_audit(connection: AsyncConnection, older_than: float) -> int:
    """Delete rows older than `older_than`, except the newest one: SQLite would hand its id out again otherwise."""
    newest = select(func.max(audit.c.id)).scalar_subquery()
    result = await connection.execute(delete(audit).where(audit.c.at < older_than, audit.c.id < newest))
    return max(result.rowcount or 0, 0)
