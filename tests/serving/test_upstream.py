"""The router's upstream client against a real tiny server on loopback."""

from __future__ import annotations

import asyncio

import pytest

from corral.serving.upstream import READ_BOUND, Upstream, UpstreamError
from tests.serving.loopback import Replica, ok


async def test_a_connection_is_kept_alive_and_reused():
    async with Replica(ok) as replica:
        upstream = Upstream()
        for _ in range(3):
            response = await upstream.request(replica.address, "GET", "/x?y=1", [(b"x-a", b"b")], b"")
            assert response.status == 200 and (b"x-echo", b"yes") in response.headers
            assert await response.read() == b"hi"
            response.release()
        head = await upstream.request(replica.address, "HEAD", "/", [], b"")  # its length names no body to wait for
        assert head.status == 200 and head.content_length == 2 and await head.read() == b""
        head.release()
        assert replica.connections == 1
        assert replica.received[0].startswith(b"GET /x?y=1 HTTP/1.1\r\n") and b"x-a: b\r\n" in replica.received[0]
        await upstream.close()


async def test_a_chunked_response_comes_through_chunk_by_chunk():
    release = asyncio.Event()

    async def chunked(reader, writer, body):
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await release.wait()
        writer.write(b"6\r\nsecond\r\n0\r\n\r\n")

    async with Replica(chunked) as replica:
        upstream = Upstream()
        response = await upstream.request(replica.address, "GET", "/", [], b"")
        chunks = response.chunks()
        assert await anext(chunks) == b"first"  # before the rest is even written
        release.set()
        assert [c async for c in chunks] == [b"second"]
        response.release()
        again = await upstream.request(replica.address, "GET", "/", [], b"")
        assert replica.connections == 1
        again.close()
        await upstream.close()


async def test_a_replica_closing_mid_response_is_an_error():
    async def broken(reader, writer, body):
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly part")
        await writer.drain()
        return False

    async with Replica(broken) as replica:
        upstream = Upstream()
        response = await upstream.request(replica.address, "GET", "/", [], b"")
        with pytest.raises(UpstreamError, match="closed"):
            await response.read()
        response.release()
        with pytest.raises(OSError):
            await upstream.request("127.0.0.1:1", "GET", "/", [], b"")


async def test_a_body_without_length_or_chunks_ends_when_the_replica_closes():
    async def old_style(reader, writer, body):  # as an HTTP/1.0 server answers
        writer.write(b"HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\n\r\nall of ")
        await writer.drain()
        writer.write(b"it")
        return False

    async def chunks_cut(reader, writer, body):
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\ndata\r\n")
        return False

    async with Replica(old_style) as replica:
        upstream = Upstream()
        response = await upstream.request(replica.address, "GET", "/", [], b"")
        assert (response.status, await response.read()) == (200, b"all of it")
        response.release()
        assert upstream.take(replica.address) is None  # a closed connection is never reused
    async with Replica(chunks_cut) as replica:
        response = await upstream.request(replica.address, "GET", "/", [], b"")
        with pytest.raises(UpstreamError, match="closed"):
            await response.read()  # chunks promise their own end: a close before it is a break
        response.release()
        await upstream.close()


async def test_closing_a_response_cut_short_closes_the_replicas_connection():
    async def endless(reader, writer, body):
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        while True:
            writer.write(b"4\r\ndata\r\n")
            await writer.drain()
            await asyncio.sleep(0.01)

    async with Replica(endless) as replica:
        upstream = Upstream()
        response = await upstream.request(replica.address, "GET", "/", [], b"")
        assert await anext(response.chunks()) == b"data"
        response.release()  # not read to its end: the connection goes
        await asyncio.wait_for(replica.closed.wait(), 5)
        await upstream.close()


async def test_a_body_larger_than_socket_buffers_streams_both_ways():
    size = 8 * READ_BOUND

    async def echo_length(reader, writer, body):
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body))
        writer.write(body)
        await writer.drain()

    async def pieces():
        for _ in range(size // 65536):
            yield b"z" * 65536

    async with Replica(echo_length) as replica:
        upstream = Upstream()
        for length in (size, None):  # the client's own length, then chunked
            response = await upstream.request(replica.address, "POST", "/", [], pieces(), length)
            received = 0
            async for chunk in response.chunks():
                received += len(chunk)
            assert received == size
            response.release()
        assert b"transfer-encoding: chunked" in replica.received[1].lower()
        assert replica.connections == 1
        await upstream.close()


async def test_a_stale_kept_alive_connection_is_replaced_for_a_bytes_body():
    async def once(reader, writer, body):
        await ok(reader, writer, body)
        await writer.drain()
        return False  # closes after each answer though it said nothing

    async with Replica(once) as replica:
        upstream = Upstream()
        for _ in range(2):
            response = await upstream.request(replica.address, "POST", "/", [], b"abc")
            assert await response.read() == b"abc"
            response.release()
            await asyncio.sleep(0)
        assert replica.connections == 2
        await upstream.close()
