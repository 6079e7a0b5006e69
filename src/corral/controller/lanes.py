"""What the controller's lanes share: calls answered past FastAPI's routing (`heartbeat_lane`, `submit_lane`) read
their body whole first, and hand it on to the app, read, when they let a call go to its route."""

from __future__ import annotations

from starlette.types import Message, Receive

JSON = b"application/json"  # the content type FastAPI reads a body as JSON by


async def whole_body(receive: Receive) -> tuple[bytes | None, list[Message]]:
    """The body, where it came in one message (as `BodyLimit` hands it on), and the messages read."""
    message = await receive()
    if message["type"] != "http.request" or message.get("more_body", False):
        return None, [message]
    return message.get("body", b""), [message]


def replaying(messages: list[Message], receive: Receive) -> Receive:
    """The messages already read, then whatever the server says next."""
    left = list(messages)

    async def replayed() -> Message:
        return left.pop(0) if left else await receive()

    return replayed
