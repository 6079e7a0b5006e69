"""Wakeups between the controllers of one PostgreSQL store: a NOTIFY after committed writes, heard by the others
on one listening connection each.

What a controller learns from its own commits (wake the engine, ring the event stream, wake a worker's long poll,
forget cached settings) it learns of the others' commits through this. What is pending is sent as one NOTIFY
when the sender next runs: the commits and worker orders of one engine step go out together.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import asyncpg
from sqlalchemy.engine import make_url

from corral.store.database import normalize_url

log = logging.getLogger("corral.notify")

CHANNEL = "corral_changes"
MAX_WORKERS = 100  # worker ids named in one payload (PostgreSQL takes 8000 bytes); past it: every worker
RECONNECT_DELAY = 1.0  # seconds between tries to listen again after the connection is lost
CONNECT_TIMEOUT = 10.0


@dataclass(frozen=True)
class Change:
    """What another controller committed: whether state moved, which workers have new orders (None: any), and
    whether the settings that submissions are checked against changed."""

    sender: str
    state: bool = False
    workers: frozenset[str] | None = frozenset()
    settings: bool = False
    dialing: frozenset[str] = frozenset()  # workers asked to dial back to the sender for a client's channel


def encode(change: Change) -> str:
    workers = None if change.workers is None or len(change.workers) > MAX_WORKERS else sorted(change.workers)
    return json.dumps({"from": change.sender, "state": change.state, "workers": workers,
                       "settings": change.settings, "dialing": sorted(change.dialing)[:MAX_WORKERS]},
                      separators=(",", ":"))


def decode(payload: str) -> Change | None:
    """The change a payload names; None for one that is not ours."""
    try:
        record = json.loads(payload)
        workers = record["workers"]
        return Change(str(record["from"]), bool(record["state"]),
                      None if workers is None else frozenset(str(worker) for worker in workers),
                      bool(record["settings"]), frozenset(str(worker) for worker in record.get("dialing", ())))
    except (ValueError, KeyError, TypeError):
        return None


class Notifier:
    """One controller's end: collects what its commits changed and sends it; hands the others' changes to `heard`."""

    def __init__(self, url: str, sender: str, heard: Callable[[Change], None]) -> None:
        self.dsn = make_url(normalize_url(url)).set(drivername="postgresql").render_as_string(hide_password=False)
        self.sender = sender
        self.heard = heard
        self._pending = Change(sender)
        self._dirty = asyncio.Event()

    def state_moved(self) -> None:
        self._add(Change(self.sender, state=True))

    def workers_ordered(self, worker_ids: Iterable[str]) -> None:
        worker_ids = frozenset(worker_ids)
        if worker_ids:
            self._add(Change(self.sender, workers=worker_ids))

    def settings_changed(self) -> None:
        self._add(Change(self.sender, settings=True))

    def dial_awaited(self, worker_ids: Iterable[str]) -> None:
        """These workers are to dial back here: their heartbeats on other controllers must read relay orders."""
        worker_ids = frozenset(worker_ids)
        self._add(Change(self.sender, workers=worker_ids, dialing=worker_ids))

    def _add(self, change: Change) -> None:
        pending = self._pending
        workers = None if pending.workers is None or change.workers is None else pending.workers | change.workers
        self._pending = Change(self.sender, pending.state or change.state, workers, pending.settings or change.settings,
                               pending.dialing | change.dialing)
        self._dirty.set()

    def _hear(self, _connection, _pid, _channel, payload: str) -> None:
        change = decode(payload)
        if change is not None and change.sender != self.sender:
            self.heard(change)

    async def run(self) -> None:
        """Listen and send until cancelled; after a lost connection, listen again (and, having perhaps missed
        changes meanwhile, take everything as changed)."""
        failing = False
        while True:
            try:
                connection = await asyncpg.connect(self.dsn, timeout=CONNECT_TIMEOUT)
            except (TimeoutError, OSError, asyncpg.PostgresError) as error:
                if not failing:
                    log.warning("cannot listen for other controllers' changes (%s); trying again every %.0fs",
                                error, RECONNECT_DELAY)
                failing = True
                await asyncio.sleep(RECONNECT_DELAY)
                continue
            try:
                await self._serve(connection, missed=failing)
                failing = False
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as error:
                log.warning("lost the connection that hears other controllers' changes (%s)", error)
                failing = True
                self._add(Change(self.sender, True, None, True))  # what was pending may not have gone out
            finally:
                connection.terminate()
            await asyncio.sleep(RECONNECT_DELAY)

    async def _serve(self, connection: asyncpg.Connection, missed: bool) -> None:
        lost = asyncio.Event()
        connection.add_termination_listener(lambda _connection: lost.set())
        await connection.add_listener(CHANNEL, self._hear)
        if missed:
            self.heard(Change("", state=True, workers=None, settings=True))
        while not lost.is_set():
            dirty = asyncio.create_task(self._dirty.wait())
            gone = asyncio.create_task(lost.wait())
            try:
                await asyncio.wait({dirty, gone}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                dirty.cancel()
                gone.cancel()
            if not self._dirty.is_set():
                break
            self._dirty.clear()
            change, self._pending = self._pending, Change(self.sender)
            await connection.execute("SELECT pg_notify($1, $2)", CHANNEL, encode(change))
        raise ConnectionError("the listening connection closed")
