"""The relay's pairing: a client's WebSocket waits for its worker to dial back, then the two are piped together.

Sessions live in this controller's memory (a restart ends them all: see close_all_live). A client's session
is named with an unguessable id; its worker learns it from its heartbeat reply (woken at once) and dials
`/api/v1/relay/{session}`. Once paired, frames pass verbatim both ways, text as text and binary as binary,
one at a time: each send is awaited before the next receive, so a slow reader slows its writer (nothing is
buffered beyond the frame in hand). When one side closes, the other is closed with the same code and reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from starlette.websockets import WebSocket, WebSocketDisconnect

from corral.core.relay import CLOSE_FORBIDDEN, CLOSE_NOT_FOUND, CLOSE_UNAVAILABLE
from corral.engine.loop import WorkerSignals
from corral.metrics import RELAY_CONNECT_SECONDS, RELAYS_OPEN
from corral.store.attachments import Opening, mark_ended, mark_open, open_attachment
from corral.store.store import Store

log = logging.getLogger(__name__)

MAX_REASON_BYTES = 123  # what a WebSocket close frame carries of its reason
UNSENDABLE = frozenset({1004, 1005, 1006, 1015})  # codes that say no close frame came; none may be sent
CLIENT_GONE = 1001


class Refused(Exception):
    """A channel refused at the edge: the close code and a reason a person can read."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def new_session() -> str:
    return secrets.token_urlsafe(24)


def fit(reason: str) -> str:
    """`reason` cut to what a close frame carries, on a character boundary."""
    return reason.encode()[:MAX_REASON_BYTES].decode(errors="ignore")


async def close(websocket: WebSocket, code: int, reason: str) -> None:
    """Close `websocket`, unless it is closed already."""
    with contextlib.suppress(RuntimeError, OSError, WebSocketDisconnect):
        await websocket.close(code, fit(reason))


@dataclass
class Waiting:
    """A client's session until its worker dials back."""

    worker_id: str
    joined: asyncio.Future[WebSocket] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    done: asyncio.Event = field(default_factory=asyncio.Event)  # the pairing ended: the worker's route may return


@dataclass(frozen=True)
class Ending:
    code: int
    reason: str


class Relays:
    """This controller's sessions waiting for their workers."""

    def __init__(self, store: Store, signals: WorkerSignals, connect_timeout: float) -> None:
        self.store = store
        self.signals = signals
        self.connect_timeout = connect_timeout
        self._waiting: dict[str, Waiting] = {}
        # Workers another controller sharing the store waits for (worker -> until, monotonic): their heartbeats
        # here read relay orders too. Told through `expect`; this one's waits are told to the others by `announce`.
        self._elsewhere: dict[str, float] = {}
        self.announce: Callable[[Iterable[str]], None] | None = None

    async def serve(self, client: WebSocket, opening: Opening) -> None:
        """Record the channel, wake its worker, wait for it to dial back, pipe the two; record how it ended."""
        worker_id = opening.target.worker_id or ""
        async with self.store.write() as connection:
            await open_attachment(connection, opening, time.time())
        waiting = self._waiting[opening.session] = Waiting(worker_id)
        started = time.monotonic()
        if self.announce is not None:
            self.announce({worker_id})
        self.signals.notify({worker_id})
        try:
            ending = await self._pair_and_pipe(client, waiting, opening, started)
        finally:
            self._waiting.pop(opening.session, None)
            waiting.done.set()
        async with self.store.write() as connection:
            await mark_ended(connection, opening.session, ending.code, ending.reason, time.time())

    def awaited_by(self, worker_id: str) -> bool:
        """Whether a channel (here, or on another controller) waits for this worker to dial back: only then has a
        heartbeat a relay order to read."""
        if self._elsewhere and self._elsewhere.get(worker_id, 0.0) > time.monotonic():
            return True
        return any(waiting.worker_id == worker_id for waiting in self._waiting.values())

    def expect(self, worker_ids: Iterable[str]) -> None:
        """Another controller waits for these workers to dial back to it (within the connect timeout)."""
        now = time.monotonic()
        self._elsewhere = {w: until for w, until in self._elsewhere.items() if until > now}
        self._elsewhere.update((worker_id, now + self.connect_timeout) for worker_id in worker_ids)

    def claim(self, session: str, worker_id: str) -> Waiting:
        """The session a worker dials back for, taken out of waiting; Refused when it is not this worker's."""
        waiting = self._waiting.get(session)
        if waiting is None or waiting.joined.done():
            raise Refused(CLOSE_NOT_FOUND, "no channel waits for a worker under this session (ended, or never opened)")
        if waiting.worker_id != worker_id:
            raise Refused(CLOSE_FORBIDDEN, f"this session is for worker {waiting.worker_id}, not {worker_id}")
        del self._waiting[session]
        return waiting

    async def _pair_and_pipe(self, client: WebSocket, waiting: Waiting, opening: Opening, started: float) -> Ending:
        # The client's first frame is read while waiting, so that a client gone meanwhile is seen at once; it is
        # the one frame held, and is sent first once paired.
        first = asyncio.ensure_future(client.receive())
        try:
            await asyncio.wait({waiting.joined, first}, timeout=self.connect_timeout,
                               return_when=asyncio.FIRST_COMPLETED)
            if first.done() and first.result()["type"] == "websocket.disconnect" and not waiting.joined.done():
                return _said(first.result(), CLIENT_GONE, "the client went away before the worker answered")
            if not waiting.joined.done():
                await asyncio.wait({waiting.joined}, timeout=self.connect_timeout - (time.monotonic() - started))
        except BaseException:
            first.cancel()
            raise
        if not waiting.joined.done():
            first.cancel()
            waiting.joined.cancel()
            ending = Ending(CLOSE_UNAVAILABLE, f"worker {waiting.worker_id} did not answer in "
                                               f"{self.connect_timeout:g}s")
            await close(client, ending.code, ending.reason)
            return ending
        worker = waiting.joined.result()
        connected = time.monotonic() - started
        RELAY_CONNECT_SECONDS.observe(connected)
        target = opening.target
        log.info("job %d task %d attempt %d: %s relay %s paired with worker %s in %.3fs", target.job_id,
                 target.index, target.attempt, opening.kind, opening.session[:8], waiting.worker_id, connected)
        async with self.store.write() as connection:
            await mark_open(connection, opening.session, time.time())
        RELAYS_OPEN.inc()
        try:
            return await pipe(client, worker, first)
        finally:
            RELAYS_OPEN.dec()


async def pipe(client: WebSocket, worker: WebSocket, first: asyncio.Future) -> Ending:
    """Frames both ways until one side closes; the other is then closed with its code and reason. `first`: the
    client's frame read while it waited (or its close)."""
    pumps = {asyncio.ensure_future(_pump(client, worker, CLIENT_GONE, "the client went away", first)),
             asyncio.ensure_future(_pump(worker, client, CLOSE_UNAVAILABLE, "the worker's connection was lost"))}
    try:
        while True:
            done, pumps = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            for pump in done:
                if pump.result() is not None:
                    return pump.result()
    finally:
        for pump in pumps:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump


async def _pump(source: WebSocket, sink: WebSocket, dropped_code: int, dropped_reason: str,
                first: asyncio.Future | None = None) -> Ending | None:
    """Frames from `source` to `sink` until `source` closes (closing `sink` alike); None when `sink` went first."""
    message = await first if first is not None else await source.receive()
    while True:
        if message["type"] == "websocket.disconnect":
            ending = _said(message, dropped_code, dropped_reason)
            await close(sink, ending.code, ending.reason)
            return ending
        if not await _forward(message, sink):
            return None
        message = await source.receive()


async def _forward(message: dict, sink: WebSocket) -> bool:
    """Send one received frame on, as it came; False when `sink` is closed."""
    frame = {key: message[key] for key in ("bytes", "text") if message.get(key) is not None}
    try:
        await sink.send({"type": "websocket.send", **frame})
    except (RuntimeError, OSError, WebSocketDisconnect):
        return False
    return True


def _said(message: dict, dropped_code: int, dropped_reason: str) -> Ending:
    """How a side closed, as the other side can be told: a close with no frame (a dropped connection) becomes
    `dropped_code`."""
    code = message.get("code", 1005)
    if code in UNSENDABLE:
        return Ending(dropped_code, dropped_reason)
    return Ending(code, message.get("reason") or "")
