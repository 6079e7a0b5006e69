"""A streamed request body: relayed whole and in order, and read ahead while its request waits."""

from __future__ import annotations

import asyncio

import pytest

from corral.serving.streamed_body import AHEAD_BOUND, ClientGone, StreamedBody
from tests.waiting import wait_until


def client(*messages: dict):
    """A receive channel that gives `messages`, then waits for ever."""
    queue: asyncio.Queue = asyncio.Queue()
    for message in messages:
        queue.put_nowait(message)
    return queue.get


def piece(body: bytes, more: bool = True) -> dict:
    return {"type": "http.request", "body": body, "more_body": more}


async def test_the_body_comes_through_in_order_with_or_without_a_wait():
    for waited in (False, True):
        body = StreamedBody(client(piece(b"b"), piece(b"c"), piece(b"", more=False)), b"a")
        if waited:
            watching = asyncio.ensure_future(body.watch())
            await wait_until(lambda watched=body: watched.done, what="the body to be read ahead")
            watching.cancel()
            assert body.whole() == b"abc"
        assert [c async for c in body.chunks()] == [b"a", b"b", b"c"]


async def test_a_client_leaving_half_way_through_its_body_is_seen_while_it_waits():
    body = StreamedBody(client(piece(b"b"), {"type": "http.disconnect"}), b"a")
    await asyncio.wait_for(body.watch(), 1)
    assert body.whole() is None


async def test_past_the_bound_reading_ahead_stops_and_the_rest_comes_later():
    big = b"x" * AHEAD_BOUND
    receive = client(piece(big), piece(b"late"), piece(b"", more=False))
    body = StreamedBody(receive, b"a")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(body.watch(), 0.05)
    assert body.whole() is None
    assert b"".join([c async for c in body.chunks()]) == b"a" + big + b"late"


async def test_a_client_leaving_while_its_body_is_relayed_is_an_error():
    body = StreamedBody(client({"type": "http.disconnect"}), b"a")
    chunks = body.chunks()
    assert await anext(chunks) == b"a"
    with pytest.raises(ClientGone):
        await anext(chunks)
