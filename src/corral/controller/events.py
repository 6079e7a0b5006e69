"""Following the event stream: subscribers woken by this controller's commits, and the retention pruner.

A subscriber never polls the store in a tight loop: it sleeps until a write commits here (the
store's on-commit hook rings the hub), and otherwise re-reads every SAFETY_POLL seconds, which
is how it hears of writes made by another controller sharing the store. A ring after a quiet
spell is read at once; rings closer together are read at most once per COALESCE.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Collection

from corral.core.events import GAP_SETTLE_SECONDS
from corral.core.views import EventView
from corral.metrics import EVENTS_PRUNED
from corral.store.events import PAGE, prune_events, read_events, read_horizon
from corral.store.handler_locks import HandlerBusy
from corral.store.store import Store
from corral.waiting import woken

log = logging.getLogger("corral.events")

SAFETY_POLL = 2.0  # seconds between reads when nothing rang
# Reads a ring wakes are at least this far apart: a burst of commits costs one read per period, and a commit that
# follows another by less (a task's end just after its start, and the job's) reaches the stream at most this late.
COALESCE = 0.01
GAP_RECHECK = 0.5  # seconds between reads while a gap in the ids is still filling
PRUNE_EVERY = 60.0
clock = time.monotonic  # how far apart reads are (a test moves it on)


class EventHub:
    """A bell rung after every commit; each ring replaces the event, so a waiter never misses one."""

    def __init__(self) -> None:
        self._rung = asyncio.Event()

    def ring(self) -> None:
        self._rung.set()
        self._rung = asyncio.Event()

    def current(self) -> asyncio.Event:
        """Take this before reading: a commit after the read then rings what the reader waits on."""
        return self._rung


async def follow_events(store: Store, hub: EventHub, after: int, job_id: int | None = None, *,
                        deployment: str | None = None, projects: Collection[str] | None = None, follow: bool = True,
                        idle: float = SAFETY_POLL) -> AsyncIterator[list[EventView]]:
    """Batches of events above `after` (of one job, one deployment, or the jobs and deployments of `projects`), in
    id order; an empty batch when idle for `idle` seconds.

    Without `follow`, ends once caught up.
    """
    narrowed = job_id is not None or deployment is not None or projects is not None
    while True:
        rung = hub.current()
        read_at = clock()
        async with store.read() as connection:
            read = await read_horizon(connection, after, time.time(), GAP_SETTLE_SECONDS)
            horizon = read.safe
            # A narrowed stream moves past the rows it leaves out: it would read them again at every wake, more and
            # more of them as the cluster runs.
            upto = read.reach if narrowed else horizon
            batch = await read_events(connection, after, job_id, PAGE, upto, deployment, projects)
        if batch:
            after = batch[-1].id
            yield batch
            if len(batch) == PAGE:
                continue
        if upto is not None:  # every row of the page up to the horizon (or the newest) has been read
            after = max(after, upto)
        if not follow and horizon is None:
            return
        if horizon is not None:
            await asyncio.sleep(GAP_RECHECK)
            continue
        if not await woken(rung, idle):
            if not batch:
                yield []
            continue
        # The commit that rang is read at once after a quiet spell (a job's end reaches whoever waits for it
        # without a fixed delay); within COALESCE of the last read it waits out the rest of it.
        await asyncio.sleep(max(0.0, read_at + COALESCE - clock()))


async def prune_loop(store: Store, retention: float, every: float = PRUNE_EVERY) -> None:
    """Delete events older than the retention window, every `every` seconds."""
    while True:
        try:
            async with store.write("PruneEvents") as connection:
                pruned = await prune_events(connection, time.time() - retention)
            if pruned:
                EVENTS_PRUNED.inc(pruned)
                log.info("pruned %d events older than %.0fs", pruned, retention)
        except HandlerBusy:
            pass  # another controller prunes now
        except Exception:
            log.exception("pruning events failed; will try again")
        await asyncio.sleep(every)
