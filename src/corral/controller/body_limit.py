"""Every request body, uploads aside, is refused with 413 past a limit, before anything parses or keeps it."""

from __future__ import annotations

import json
import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from corral.core.limits import MAX_REQUEST_BODY

# Uploads read their bodies as streams, under their own (larger) limits.
UPLOADS = re.compile(r"/api/v1/(bundles/[^/]+|workers/[^/]+/tasks/[^/]+/checkpoint|jobs/[^/]+/tasks/[^/]+/result)")
DRAIN_FACTOR = 16  # a body up to this many times the limit is read and dropped, so its sender sees the 413


class BodyLimit:
    """ASGI middleware: reads the body up to `limit` bytes and hands it on whole, or answers 413.

    A declared Content-Length over the limit is refused before any byte is read. A refused body is
    read and dropped (up to `DRAIN_FACTOR` times the limit) before the answer: a reply sent while
    the client still sends reaches it as a reset connection, not as the 413. Nothing past the
    limit is ever held, so refused requests cost no memory.
    """

    def __init__(self, app: ASGIApp, limit: int = MAX_REQUEST_BODY) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or UPLOADS.fullmatch(scope["path"]):
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            if declared <= self.limit * DRAIN_FACTOR:
                await _drain(receive, self.limit * DRAIN_FACTOR)
            await _refuse(send, declared, self.limit)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            size += len(message.get("body", b""))
            more = message.get("more_body", False)
            if size > self.limit:
                if more:
                    await _drain(receive, self.limit * DRAIN_FACTOR - size)
                await _refuse(send, size, self.limit)
                return
            chunks.append(message.get("body", b""))
        await self.app(scope, _replay(b"".join(chunks), receive), send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


async def _drain(receive: Receive, budget: int) -> None:
    while budget > 0:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return
        budget -= len(message.get("body", b""))


async def _refuse(send: Send, size: int, limit: int) -> None:
    body = json.dumps({"detail": f"request body of {size} bytes or more is over the limit of "
                                 f"{limit // 2**20} MiB"}).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body as one message, then whatever the server says next (a disconnect)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed
