"""Sends job notifications by webhook: tails the event stream into the outbox, and POSTs what is due.

Each pass runs as the handler Notify (one controller at a time on a shared PostgreSQL store): in one transaction it
turns the history rows past its cursor into deliveries, moves the cursor, and claims the deliveries due now for a
lease. The POSTs are made outside any transaction (a slow receiver never holds the store), then their outcomes are
written. A controller that dies while sending leaves its claims to run out: another sends them again, so a
receiver may see a delivery twice (rarely) and tells by `X-Corral-Delivery`; never two controllers at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace

import httpx

from corral.core.events import GAP_SETTLE_SECONDS, subject
from corral.core.webhooks import (
    BACKOFF_BASE,
    TIMEOUT,
    body_bytes,
    content,
    headers,
    notification,
    retry_delay,
)
from corral.metrics import NOTIFICATIONS_DELIVERED, NOTIFICATIONS_FAILED, NOTIFICATIONS_GAVE_UP
from corral.store.events import PAGE, latest_id, read_events, safe_horizon
from corral.store.handler_locks import HandlerBusy
from corral.store.store import Store
from corral.store.webhooks import (
    Delivery,
    add_deliveries,
    anything_due,
    claim_due,
    prune_deliveries,
    read_cursor,
    record_delivered,
    record_failed,
    record_given_up,
    stored_cursor,
    targets,
    webhook_secret,
    write_cursor,
)

log = logging.getLogger("corral.notify")

HANDLER = "Notify"
POLL = 1.0  # seconds between passes when nothing was due
LEASE = 60.0  # seconds a claimed delivery is not due for others: far longer than one POST may take
BATCH = 100  # deliveries claimed per pass
PARALLEL = 20  # POSTs in flight at once
PRUNE_EVERY = 3600.0  # seconds between removals of old finished deliveries


@dataclass(frozen=True)
class Outcome:
    delivery: Delivery
    error: str | None  # None: delivered


class Webhooks:
    """The controller's notification loop; `backoff` is the wait before a first retry (--notify-backoff)."""

    def __init__(self, store: Store, version: str, retention: float, backoff: float = BACKOFF_BASE) -> None:
        self.store = store
        self.version = version
        self.retention = retention
        self.backoff = backoff
        self.pruned_at = 0.0

    async def run(self) -> None:
        async with httpx.AsyncClient(timeout=TIMEOUT, follow_redirects=False) as client:
            while True:
                more = False
                try:
                    more = await self.run_pass(client, time.time())
                except HandlerBusy:
                    pass  # another controller sends now
                except Exception:
                    log.exception("a notification pass failed; will try again")
                if not more:
                    await asyncio.sleep(POLL)

    async def run_pass(self, client: httpx.AsyncClient, now: float) -> bool:
        """Fill the outbox, send what is due; True when a full page of events or batch of deliveries went (more
        may wait). Retries are timed from `now`, the pass's start."""
        async with self.store.read() as connection:
            cursor = await stored_cursor(connection)
            idle = (cursor is not None and await latest_id(connection) <= cursor
                    and not await anything_due(connection, now))
        if idle and now - self.pruned_at <= PRUNE_EVERY:
            return False  # nothing new, nothing due: no write (SQLite has one writer)
        # Not a state move: other controllers need not wake for the outbox and its cursor.
        async with self.store.write(HANDLER, moves_state=False) as connection:
            behind = await self._fill(connection, now)
            due = await claim_due(connection, now, LEASE, BATCH)
            secret = await webhook_secret(connection) if due else ""
            if now - self.pruned_at > PRUNE_EVERY:
                await prune_deliveries(connection, now - self.retention)
                self.pruned_at = now
        if not due:
            return behind
        gate = asyncio.Semaphore(PARALLEL)
        by_job: dict[int, list[Delivery]] = {}
        for delivery in due:  # oldest first
            by_job.setdefault(delivery.job_id, []).append(delivery)

        async def send(deliveries: list[Delivery]) -> list[Outcome]:
            """One job's deliveries in the order they were made: a receiver hears a start before its end."""
            async with gate:
                return [Outcome(delivery, await self._post(client, delivery, secret)) for delivery in deliveries]

        outcomes = [outcome for sent in await asyncio.gather(*(send(group) for group in by_job.values()))
                    for outcome in sent]
        await self._record(outcomes, now)
        return behind or len(due) == BATCH

    async def _fill(self, connection, now: float) -> bool:
        """The notifications among the events past the cursor become deliveries; the cursor moves past them. True
        when a full page was read (more may follow)."""
        after = await read_cursor(connection)
        horizon = await safe_horizon(connection, after, now, GAP_SETTLE_SECONDS)
        events = await read_events(connection, after, limit=PAGE, upto=horizon)
        moments = [(event, kind) for event in events if event.job_id is not None
                   and (kind := notification(subject(event.job_id, event.task_id, event.deployment_id,
                                                     event.replica_id), event.to_state, event.type))]
        jobs = await targets(connection, {event.job_id for event, _ in moments}) if moments else {}
        rows = []
        for event, kind in moments:
            target = jobs.get(event.job_id)
            if target is None or target.url is None:
                continue
            facts = target.facts if event.to_state is None else replace(target.facts, state=event.to_state)
            rows.append({"job_id": event.job_id, "url": target.url, "event": kind,
                         "body": content(kind, facts, event.at, event.message)})
        await add_deliveries(connection, rows, now)
        moved = events[-1].id if events else after
        if horizon is not None and len(events) < PAGE:
            moved = max(moved, horizon)
        if moved != after:
            await write_cursor(connection, moved)
        return len(events) == PAGE

    async def _post(self, client: httpx.AsyncClient, delivery: Delivery, secret: str) -> str | None:
        """POST one delivery; None when the receiver took it (2xx), else what went wrong, in one line."""
        body = body_bytes(delivery.body, delivery.id)
        sent = headers(secret, int(time.time()), body, delivery.event, delivery.id, self.version)
        try:
            response = await client.post(delivery.url, content=body, headers=sent)
        except httpx.HTTPError as error:
            return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else 'no answer'}"
        if 200 <= response.status_code < 300:
            return None
        if response.is_redirect:
            return f"HTTP {response.status_code} (redirects are not followed)"
        return f"HTTP {response.status_code}"

    async def _record(self, outcomes: list[Outcome], now: float) -> None:
        async with self.store.write(moves_state=False) as connection:
            for outcome in outcomes:
                delivery, tries = outcome.delivery, outcome.delivery.tries + 1
                if outcome.error is None:
                    NOTIFICATIONS_DELIVERED.labels(delivery.event).inc()
                    await record_delivered(connection, delivery.id, tries, now)
                    continue
                NOTIFICATIONS_FAILED.labels(delivery.event).inc()
                delay = retry_delay(tries, self.backoff)
                if delay is not None:
                    await record_failed(connection, delivery.id, tries, outcome.error, now + delay)
                    continue
                NOTIFICATIONS_GAVE_UP.labels(delivery.event).inc()
                log.warning("notification %d (%s of job %d) to %s gave up after %d tries: %s", delivery.id,
                            delivery.event, delivery.job_id, delivery.url, tries, outcome.error)
                await record_given_up(connection, delivery, tries, outcome.error, now)
