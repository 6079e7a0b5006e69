"""The webhook outbox (deliveries), the cursor that fills it from the event stream, the cluster's signing secret,
and each project's default notify URL."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, delete, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.webhooks import JobFacts, chosen_url
from corral.store.cluster_state import dialect_insert, put_setting, seed_settings
from corral.store.events import latest_id
from corral.store.schema import cluster_settings, deliveries, history, jobs, project_notify

SECRET = "webhook_secret"
CURSOR = "notify_cursor"  # the id of the last history row turned into deliveries


@dataclass(frozen=True)
class Target:
    """A job as its notifications need it: what the body says of it, and where they go (None: nowhere)."""

    facts: JobFacts
    url: str | None


@dataclass(frozen=True)
class Delivery:
    id: int
    job_id: int
    url: str
    event: str
    body: dict[str, Any]
    tries: int


async def webhook_secret(connection: AsyncConnection) -> str:
    """The cluster's signing secret, made on first use (two controllers at once agree on one)."""
    return (await seed_settings(connection, {SECRET: secrets.token_hex(32)}))[SECRET]


async def rotate_secret(connection: AsyncConnection) -> str:
    secret = secrets.token_hex(32)
    await put_setting(connection, SECRET, secret)
    return secret


async def stored_cursor(connection: AsyncConnection) -> int | None:
    """Where the outbox's filling stands, if it ever started (a read: it seeds nothing)."""
    stored = (await connection.execute(select(cluster_settings.c.value).where(cluster_settings.c.name == CURSOR))
              ).scalar()
    return None if stored is None else int(stored)


async def read_cursor(connection: AsyncConnection) -> int:
    """Where the outbox's filling stands; the first time, the newest event (what happened before is not sent)."""
    stored = await stored_cursor(connection)
    if stored is None:
        return int((await seed_settings(connection, {CURSOR: str(await latest_id(connection))}))[CURSOR])
    return stored


async def write_cursor(connection: AsyncConnection, after: int) -> None:
    await put_setting(connection, CURSOR, str(after))


async def targets(connection: AsyncConnection, job_ids: set[int]) -> dict[int, Target]:
    """Each job's facts and notify URL: its spec's, else its project's default."""
    rows = (await connection.execute(
        select(jobs.c.id, jobs.c.name, jobs.c.state, jobs.c.spec, jobs.c.owner).where(jobs.c.id.in_(job_ids))
    )).all()
    projects = {row.spec.get("project", "default") for row in rows}
    defaults = dict((await connection.execute(
        select(project_notify.c.project, project_notify.c.url).where(project_notify.c.project.in_(projects))
    )).all())
    found = {}
    for row in rows:
        project = row.spec.get("project", "default")
        found[row.id] = Target(JobFacts(row.id, row.name, row.state, project, row.owner),
                               chosen_url(row.spec.get("notify"), defaults.get(project)))
    return found


_ANY_DEFAULT = select(project_notify.c.project).limit(1)
_NAMING_A_URL = (select(jobs.c.id).where(jobs.c.id.in_(bindparam("ids", expanding=True)),
                                         jobs.c.spec["notify"].as_string().is_not(None)).limit(1))


async def may_notify(connection: AsyncConnection, job_ids: set[int]) -> bool:
    """Whether any of these jobs may have a notify URL (`targets` would find one): some project has a default, or
    one of them names a URL of its own (or opts out: `targets` tells). False: none of their rows is a delivery."""
    if (await connection.execute(_ANY_DEFAULT)).first() is not None:
        return True
    return (await connection.execute(_NAMING_A_URL, {"ids": sorted(job_ids)})).first() is not None


async def add_deliveries(connection: AsyncConnection, rows: list[dict[str, Any]], now: float) -> None:
    """Outbox rows (job_id, url, event, body), due now."""
    if rows:
        await connection.execute(insert(deliveries), [{**row, "tries": 0, "next_try_at": now, "created_at": now}
                                                      for row in rows])


async def claim_due(connection: AsyncConnection, now: float, lease: float, limit: int) -> list[Delivery]:
    """The deliveries due now, oldest first, each made not due for `lease` seconds: while this controller sends
    them no other one does (and if it dies, another sends them once the lease ran out)."""
    rows = (await connection.execute(
        select(deliveries).where(deliveries.c.next_try_at <= now).order_by(deliveries.c.id).limit(limit)
    )).all()
    if rows:
        await connection.execute(update(deliveries).where(deliveries.c.id.in_([row.id for row in rows]))
                                 .values(next_try_at=now + lease))
    return [Delivery(row.id, row.job_id, row.url, row.event, dict(row.body), row.tries) for row in rows]


async def anything_due(connection: AsyncConnection, now: float) -> bool:
    """Whether a delivery is due now: a pass that has neither this nor new events takes no write."""
    return (await connection.execute(select(deliveries.c.id).where(deliveries.c.next_try_at <= now).limit(1))
            ).first() is not None


async def record_delivered(connection: AsyncConnection, delivery_id: int, tries: int, now: float) -> None:
    await connection.execute(update(deliveries).where(deliveries.c.id == delivery_id)
                             .values(tries=tries, delivered_at=now, next_try_at=None, last_error=None))


async def record_failed(connection: AsyncConnection, delivery_id: int, tries: int, error: str,
                        next_try_at: float) -> None:
    await connection.execute(update(deliveries).where(deliveries.c.id == delivery_id)
                             .values(tries=tries, last_error=error, next_try_at=next_try_at))


async def record_given_up(connection: AsyncConnection, delivery: Delivery, tries: int, error: str,
                          now: float) -> None:
    """No more tries; the job's history says so (`corral events`, `corral info`)."""
    await connection.execute(update(deliveries).where(deliveries.c.id == delivery.id)
                             .values(tries=tries, last_error=error, next_try_at=None, gave_up_at=now))
    await connection.execute(insert(history).values(
        at=now, job_id=delivery.job_id, handler="Notify", result="GAVE_UP",
        message=f"notification to {delivery.url} gave up after {tries} {'try' if tries == 1 else 'tries'}: {error}"))


async def prune_deliveries(connection: AsyncConnection, older_than: float) -> int:
    """Forget deliveries delivered or given up before `older_than`."""
    result = await connection.execute(delete(deliveries).where(or_(
        deliveries.c.delivered_at < older_than, deliveries.c.gave_up_at < older_than)))
    return max(result.rowcount or 0, 0)


async def project_defaults(connection: AsyncConnection, project: str | None = None) -> dict[str, str]:
    """Every project's default notify URL (or `project`'s alone)."""
    query = select(project_notify.c.project, project_notify.c.url).order_by(project_notify.c.project)
    if project is not None:
        query = query.where(project_notify.c.project == project)
    return dict((await connection.execute(query)).all())


async def set_project_default(connection: AsyncConnection, project: str, url: str, by: str, now: float) -> None:
    values = {"url": url, "updated_at": now, "updated_by": by}
    await connection.execute(dialect_insert(connection, project_notify).values(project=project, **values)
                             .on_conflict_do_update(index_elements=["project"], set_=values))


async def clear_project_default(connection: AsyncConnection, project: str) -> bool:
    return (await connection.execute(delete(project_notify).where(project_notify.c.project == project))).rowcount > 0

