"""The registry of the controllers serving one store: each refreshes its row every second, with when it last ran
each handler, and deletes it when it stops; a row silent for GONE_AFTER is a controller gone, pruned later.

A handler this controller runs whose previous runner (per the registry) is another controller, now gone, was
taken over: a failover, counted in corral_handler_takeovers_total.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Mapping, Sequence

from corral.core.relay import CLOSE_UNAVAILABLE
from corral.engine.loop import Engine
from corral.metrics import HANDLER_TAKEOVERS
from corral.store.attachments import close_live, live_relay_holders
from corral.store.cluster_state import (
    ControllerRow,
    list_controllers,
    prune_controllers,
    register_controller,
    unregister_controller,
)
from corral.store.handler_locks import HandlerBusy
from corral.store.store import Store

log = logging.getLogger("corral.registry")

REFRESH_EVERY = 1.0  # seconds between refreshes of this controller's row
GONE_AFTER = 10.0  # seconds of silence after which a controller is listed as gone
PRUNE_AFTER = 86400.0  # seconds of silence after which its row is deleted
END_RELAYS = "EndRelaysOfGoneControllers"  # its handler lock's name
RELAY_SWEEP = 60.0  # seconds between looks for channels of gone controllers when none went meanwhile


def is_gone(row: ControllerRow, now: float) -> bool:
    return now - row.seen_at > GONE_AFTER


def takeovers(own_id: str, ran: Mapping[str, float], rows: Sequence[ControllerRow], now: float) -> list[str]:
    """The handlers this controller ran (`ran`: handler -> when) after another controller, now gone, had been the
    last to run them (per the registry's rows, which hold what this controller last wrote of itself)."""
    own = next((row.handlers for row in rows if row.id == own_id), {})
    taken = []
    for handler, ran_at in ran.items():
        if ran_at <= own.get(handler, 0.0):
            continue  # not run since the registry last heard of it
        others = [row for row in rows if row.id != own_id and handler in row.handlers]
        previous = max(others, key=lambda row: row.handlers[handler], default=None)
        if previous is not None and previous.handlers[handler] > own.get(handler, 0.0) and is_gone(previous, now):
            taken.append(handler)
    return taken


class Registry:
    """This controller's row in the registry, refreshed from the engine's record of its runs."""

    def __init__(self, store: Store, engine: Engine, url: str, version: str) -> None:
        self.store = store
        self.engine = engine
        self.started_at = time.time()
        self.id = f"{socket.gethostname()}:{os.getpid()}:{int(self.started_at * 1000)}"
        self.url = url
        self.version = version
        self._live: set[str] | None = None  # the controllers' URLs alive at the last refresh
        self._swept_at = 0.0

    def row(self, now: float) -> ControllerRow:
        return ControllerRow(self.id, self.url, os.getpid(), socket.gethostname(), self.version, self.started_at,
                             now, dict(self.engine.handler_runs), self.engine.last_pass_at)

    async def refresh(self) -> None:
        now = time.time()
        async with self.store.write(moves_state=False) as connection:
            rows = await list_controllers(connection)
            for handler in takeovers(self.id, self.engine.handler_runs, rows, now):
                HANDLER_TAKEOVERS.labels(handler).inc()
                log.info("took over handler %s from a controller that is gone", handler)
            await register_controller(connection, self.row(now))
            await prune_controllers(connection, now - PRUNE_AFTER)
        live = {row.url for row in rows if not is_gone(row, now)} | {self.url}
        if self._live is None or self._live - live or now - self._swept_at >= RELAY_SWEEP:
            await self._end_relays_of_gone(live, now)
            self._swept_at = now
        self._live = live  # after a look that failed, the next refresh looks again

    async def _end_relays_of_gone(self, live_urls: set[str], now: float) -> None:
        """End the channels whose client end a gone controller held: their relays died with it. One controller
        does it (a handler lock), the one that sees it first. Looked for when a channel may have been left so:
        at this controller's first refresh (those gone before it started), when a controller it saw alive is
        gone or left the registry, and every RELAY_SWEEP besides (a channel opened by a controller that had not
        yet registered when it went); not every second, which read the channels for nothing."""
        async with self.store.read() as connection:
            orphaned = {url for url in await live_relay_holders(connection) if url is not None} - live_urls
        if not orphaned:
            return
        with contextlib.suppress(HandlerBusy):
            async with self.store.write(END_RELAYS) as connection:
                await close_live(connection, "its controller is gone", CLOSE_UNAVAILABLE, now, held_by=orphaned)

    async def run(self) -> None:
        """Refresh every REFRESH_EVERY seconds until cancelled, then delete this controller's row."""
        try:
            while True:
                try:
                    await self.refresh()
                except Exception:
                    log.exception("refreshing this controller's row in the registry failed; will try again")
                await asyncio.sleep(REFRESH_EVERY)
        finally:
            with contextlib.suppress(Exception):
                async with self.store.write(moves_state=False) as connection:
                    await unregister_controller(connection, self.id)
