"""A /serve request body that arrives in pieces: relayed as it comes, and read ahead while its request waits.

ASGI tells of a client that went away only through `receive`, the same channel its body comes
through. So while the request is queued its body is read ahead into memory, up to AHEAD_BOUND,
and a disconnect among those messages takes it out of the queue at once. A body larger than the
bound stops being read there (TCP holds the client back); its disconnect is then seen when the
wait ends, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

AHEAD_BOUND = 4 * 2**20


class ClientGone(Exception):
    """The client went away before its body was all read."""


class StreamedBody:
    def __init__(self, receive: Callable[[], Awaitable[dict]], first: bytes) -> None:
        self._receive = receive
        self._ahead = [first]
        self._size = len(first)
        self.done = False

    async def watch(self) -> None:
        """Return when the client goes away; until then read the body ahead (up to the bound), and then wait."""
        while not self.done and self._size < AHEAD_BOUND:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                return
            self._take(message)
        if not self.done:
            await asyncio.get_running_loop().create_future()  # over the bound: only the wait's end stops this
        while (await self._receive())["type"] != "http.disconnect":
            continue

    def whole(self) -> bytes | None:
        """The body, if it was read to its end while the request waited."""
        return b"".join(self._ahead) if self.done else None

    async def chunks(self) -> AsyncIterator[bytes]:
        """What was read ahead, then the rest as it comes; ClientGone if the client leaves half-way."""
        while self._ahead:
            yield self._ahead.pop(0)
        while not self.done:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                raise ClientGone("the client went away while sending its body")
            self._take(message)
            if self._ahead:
                yield self._ahead.pop()

    def _take(self, message: dict) -> None:
        chunk = message.get("body", b"")
        if chunk:
            self._ahead.append(chunk)
            self._size += len(chunk)
        self.done = not message.get("more_body", False)
