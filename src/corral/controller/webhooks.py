"""Sends job notifications by webhook: tails the event stream into the outbox, and POSTs what is due.

Each pass runs as the handler Notify (one controller at a time on a shared PostgreSQL store): in one transaction it
turns the history rows past its cursor into deliveries, moves the cursor, and claims the deliveries due now for a
lease. The POSTs are made outside any transaction (a slow receiver never holds the store), then their outcomes are
written. A controller that dies while sending leaves its claims to run out: another sends them again, so a
receiver may see a delivery twice (rarely) and tells by `X-Corral-Delivery`; never two controllers at once.

Connections go only where `core.webhooks.refusal` lets them: the check is made as each connection is opened, on
the address it connects to (`Guarded`), so a name that resolves to a public address when checked and to a private
one a moment later gets nowhere. A refused URL is given up at once (trying again would be refused again).
Environment proxies are not used: a proxy would connect where the check never looked.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import httpcore
import httpx

from corral.core.events import GAP_SETTLE_SECONDS, subject
from corral.core.webhooks import (
    BACKOFF_BASE,
    TIMEOUT,
    Network,
    body_bytes,
    content,
    headers,
    notification,
    refusal,
    retry_delay,
)
from corral.metrics import NOTIFICATIONS_DELIVERED, NOTIFICATIONS_FAILED, NOTIFICATIONS_GAVE_UP
from corral.store.events import PAGE, job_event_ids, job_events, latest_id, read_horizon
from corral.store.handler_locks import HandlerBusy
from corral.store.store import Store
from corral.store.webhooks import (
    Delivery,
    add_deliveries,
    anything_due,
    claim_due,
    may_notify,
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
    refused: bool = False  # the address is not one webhooks may reach: no retry


class Refused(httpcore.ConnectError):
    """A connection not opened: the address is not one webhooks may reach."""


class Guarded(httpcore.AsyncNetworkBackend):
    """Opens TCP connections only to addresses `refusal` lets through, resolving the name itself and connecting to
    the address it checked."""

    def __init__(self, allowed: Sequence[Network]) -> None:
        self.allowed = tuple(allowed)
        self._backend = httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                          socket_options=None) -> httpcore.AsyncNetworkStream:
        found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
        allowed = [address for address in addresses if refusal(address, self.allowed) is None]
        if not allowed:
            named = "" if addresses == [host] else f"{host}: "
            raise Refused(f"refused: {named}{refusal(addresses[0], self.allowed)}")
        return await self._backend.connect_tcp(allowed[0], port, timeout, local_address, socket_options)

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options=None) -> httpcore.AsyncNetworkStream:
        raise Refused("refused: webhooks go over TCP only")

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


def guarded_client(allowed: Sequence[Network]) -> httpx.AsyncClient:
    """httpx's client whose connections `Guarded` opens (its transport's pool is httpcore's, given that backend)."""
    transport = httpx.AsyncHTTPTransport(trust_env=False)
    transport._pool = httpcore.AsyncConnectionPool(ssl_context=httpx.create_ssl_context(),
                                                   network_backend=Guarded(allowed))
    return httpx.AsyncClient(transport=transport, timeout=TIMEOUT, follow_redirects=False, trust_env=False)


class Webhooks:
    """The controller's notification loop; `backoff` is the wait before a first retry (--notify-backoff)."""

    def __init__(self, store: Store, version: str, retention: float, backoff: float = BACKOFF_BASE,
                 allowed: Sequence[Network] = ()) -> None:
        self.store = store
        self.version = version
        self.retention = retention
        self.backoff = backoff
        self.allowed = tuple(allowed)  # networks reached though not public (--notify-allow)
        self.pruned_at = 0.0

    async def run(self) -> None:
        async with guarded_client(self.allowed) as client:
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
                return [await self._post(client, delivery, secret) for delivery in deliveries]

        outcomes = [outcome for sent in await asyncio.gather(*(send(group) for group in by_job.values()))
                    for outcome in sent]
        await self._record(outcomes, now)
        return behind or len(due) == BATCH

    async def _fill(self, connection, now: float) -> bool:
        """The notifications among the events past the cursor become deliveries; the cursor moves past them. True
        when a full page was read (more may follow). Only jobs' own events are read: the rows of their tasks, of
        workers and of deployments are none, and the cursor moves past them unread."""
        after = await read_cursor(connection)
        upto = (await read_horizon(connection, after, now, GAP_SETTLE_SECONDS)).reach
        page = await job_event_ids(connection, after, upto)  # the rows below, without their columns: a few per job
        if not page or not await may_notify(connection, {job_id for _, job_id in page}):
            # No job of them has a URL, its own or its project's (most clusters name none): no row is a delivery.
            moved = page[-1][0] if len(page) == PAGE else max(after, upto)
            if moved != after:
                await write_cursor(connection, moved)
            return len(page) == PAGE
        events = await job_events(connection, after, upto)
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
        moved = events[-1].id if len(events) == PAGE else max(after, upto)
        if moved != after:
            await write_cursor(connection, moved)
        return len(events) == PAGE

    async def _post(self, client: httpx.AsyncClient, delivery: Delivery, secret: str) -> Outcome:
        """POST one delivery: delivered when the receiver took it (2xx), else what went wrong, in one line."""
        body = body_bytes(delivery.body, delivery.id)
        sent = headers(secret, int(time.time()), body, delivery.event, delivery.id, self.version)
        try:
            response = await client.post(delivery.url, content=body, headers=sent)
        except httpx.HTTPError as error:
            if isinstance(error.__cause__, Refused):
                return Outcome(delivery, str(error.__cause__), refused=True)
            return Outcome(delivery, f"{type(error).__name__}: "
                                     f"{str(error).splitlines()[0] if str(error) else 'no answer'}")
        if 200 <= response.status_code < 300:
            return Outcome(delivery, None)
        if response.is_redirect:
            return Outcome(delivery, f"HTTP {response.status_code} (redirects are not followed)")
        return Outcome(delivery, f"HTTP {response.status_code}")

    async def _record(self, outcomes: list[Outcome], now: float) -> None:
        async with self.store.write(moves_state=False) as connection:
            for outcome in outcomes:
                delivery, tries = outcome.delivery, outcome.delivery.tries + 1
                if outcome.error is None:
                    NOTIFICATIONS_DELIVERED.labels(delivery.event).inc()
                    await record_delivered(connection, delivery.id, tries, now)
                    continue
                NOTIFICATIONS_FAILED.labels(delivery.event).inc()
                delay = None if outcome.refused else retry_delay(tries, self.backoff)
                if delay is not None:
                    await record_failed(connection, delivery.id, tries, outcome.error, now + delay)
                    continue
                NOTIFICATIONS_GAVE_UP.labels(delivery.event).inc()
                log.warning("notification %d (%s of job %d) to %s gave up after %d tries: %s", delivery.id,
                            delivery.event, delivery.job_id, delivery.url, tries, outcome.error)
                await record_given_up(connection, delivery, tries, outcome.error, now)
