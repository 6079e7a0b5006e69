"""The single writer's lock, with a lane for liveness: a waiting liveness write takes the writer before the writes
queued ahead of it (Kubernetes keeps leases in a lane of their own for the same reason). Under overload the writer is
held back to back by report groups and the engine's passes, about a second each; in one queue a worker's liveness
mark waited behind all of them (2.2 s at the median for the long polls answered late at a thousand workers), and a
worker's liveness must not wait for the work it reports. Liveness marks are one short statement, written together
(`SeenMarks`): they delay the other writes by that much, and never starve them, since a writer that releases the
lock hands it to the next ordinary waiter when no liveness write is waiting at that moment."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator


class WriteLock:
    """One holder at a time; waiters are served first come first served within their lane, liveness first."""

    def __init__(self) -> None:
        self._held = False
        self._liveness: deque[asyncio.Future[None]] = deque()
        self._ordinary: deque[asyncio.Future[None]] = deque()

    async def acquire(self, *, liveness: bool = False) -> None:
        if not self._held:  # a waiter is handed the lock as it is released: none waits while it is free
            self._held = True
            return
        turn = asyncio.get_running_loop().create_future()
        lane = self._liveness if liveness else self._ordinary
        lane.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # handed the lock as it was cancelled: pass it on
                self.release()
            else:
                with contextlib.suppress(ValueError):
                    lane.remove(turn)
            raise

    def release(self) -> None:
        """Hand the lock to the first live waiter, liveness first; free it where none waits."""
        for lane in (self._liveness, self._ordinary):
            while lane:
                turn = lane.popleft()
                if not turn.done():
                    turn.set_result(None)  # held still, now by that waiter
                    return
        self._held = False

    @contextlib.asynccontextmanager
    async def held(self, *, liveness: bool = False) -> AsyncIterator[None]:
        await self.acquire(liveness=liveness)
        try:
            yield
        finally:
            self.release()
