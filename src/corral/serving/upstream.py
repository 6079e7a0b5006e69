"""The router's upstream client: HTTP/1.1 over kept-alive connections per replica, bytes relayed as they come.

One connection carries one exchange at a time. The request head and body are written straight
to the transport (a streamed body as it arrives, chunked when its length is unknown); the
response is parsed by httptools and its body handed on chunk by chunk, with reading paused
while more than READ_BOUND bytes wait to be taken. A response read to its end puts the
connection back for the next request to that replica; one cut short (client gone, error)
closes it, which is how the replica learns that nobody listens any more.

A connection serves either an awaiting caller (`Upstream.request`) or a `Sink`, to which its
parser's callbacks hand the response as it is parsed: the router's fast lane relays that way,
with no task or future per request.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from typing import Protocol

import httptools

READ_BOUND = 256 * 2**10  # response bytes held before reading from the replica pauses
IDLE_PER_REPLICA = 256  # kept-alive connections kept per replica address
CONNECT_TIMEOUT = 10.0


BODYLESS_METHODS = ("GET", "HEAD", "DELETE", "OPTIONS")  # no content-length for an empty body of these


class UpstreamError(Exception):
    """The replica could not be reached, or broke off its response."""


class Sink(Protocol):
    """Where a relayed response goes, from inside the connection's callbacks."""

    def response_head(self, connection: Connection) -> None: ...
    def response_body(self, body: bytes) -> None: ...
    def response_done(self, connection: Connection) -> None: ...
    def response_failed(self, connection: Connection, failure: UpstreamError) -> None: ...
    def flush(self) -> None: ...


def request_head(method: str, target: str, address: str, headers: list[tuple[bytes, bytes]],
                 body: bytes | None, length: int | None) -> bytes:
    """The request line and headers. Bytes `body` goes with its length; a stream (None) with `length`,
    or chunked when that is None too. Pieces joined once, not a line formatted per header: this runs on
    every proxied request."""
    parts = [method.encode(), b" ", target.encode(), b" HTTP/1.1\r\nhost: ", address.encode(), b"\r\n"]
    for name, value in headers:
        parts += (name, b": ", value, b"\r\n")
    if body is not None:
        if body or method not in BODYLESS_METHODS:
            parts.append(b"content-length: %d\r\n" % len(body))
    elif length is not None:
        parts.append(b"content-length: %d\r\n" % length)
    else:
        parts.append(b"transfer-encoding: chunked\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)


class Connection(asyncio.Protocol):
    """One connection to a replica, and the response of its current exchange."""

    def __init__(self, pool: Upstream, address: str) -> None:
        self.pool = pool
        self.address = address
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._writable: asyncio.Future | None = None
        self._chunks: collections.deque[bytes] = collections.deque()
        self._parser = httptools.HttpResponseParser(self)  # one per connection: it reads message after message
        self._paused = False  # reading from the replica is paused (too much read ahead, or a slow client)
        self._last_head: tuple = (b"",)  # the last response head and what was read of it: see `_read_head`
        self._reset(head_only=False)

    def _reset(self, *, head_only: bool, sink: Sink | None = None) -> None:
        self.sink = sink
        self.status = 0
        self.head = b""  # the response's head as the replica sent it, once `headed`; what came of it so far before
        self.folded_head = b""  # the head in lower case, to find fields in
        self.content_length: int | None = None
        self.chunked = False
        self.complete = False
        self.head_only = head_only
        self._reusable = False
        self._chunks.clear()
        self._buffered = 0
        if self._paused:  # whoever paused it is done with it
            self.let_go()
        self._failure: Exception | None = None
        self.headed = False  # the response's head is in
        self._head: asyncio.Future | None = None  # what `send` awaits the head on
        self._wakeup: asyncio.Future | None = None
        self._sender: asyncio.Task | None = None

    # asyncio's side ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.complete:  # nothing is asked: a replica that talks now is not to be trusted with the next one
            self.transport.close()
            return
        if not self.headed:
            self.head += data
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as error:
            self._fail(UpstreamError(f"a malformed response: {error}"))
            self.transport.close()
        else:
            if self.sink is not None:
                self.sink.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.complete and self.delimited_by_close and exc is None:
            self._completed()  # its body was all it sent before closing; the connection is not reused
        elif not self.complete:
            self._fail(UpstreamError("the replica closed the connection" + (f": {exc}" if exc else "")))
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def pause_writing(self) -> None:
        self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    # httptools' side -----------------------------------------------------------------------

    @property
    def headers(self) -> list[tuple[bytes, bytes]]:
        """The response's header fields, names as sent and values without their surrounding blanks."""
        fields = [line.partition(b":") for line in self.head.split(b"\r\n")[1:] if line]
        return [(name, value.strip(b" \t")) for name, _, value in fields]

    @property
    def delimited_by_close(self) -> bool:
        """A response head with neither length nor chunks: its body ends when the replica closes (RFC 9112 6.3)."""
        return self.headed and self._failure is None and self.content_length is None and not self.chunked

    def on_headers_complete(self) -> None:
        """The head is read from the bytes it came in, not header by header: a call per header costs more.

        httptools has framed and checked it; its response is the first message in those bytes."""
        self.headed = True
        self.head = head = self.head[:self.head.find(b"\r\n\r\n") + 4]
        if head == self._last_head[0]:  # a replica tends to send the same head again: it reads the same
            _, self.status, self.folded_head, self.content_length, self.chunked = self._last_head
        else:
            self._read_head(head)
            self._last_head = (head, self.status, self.folded_head, self.content_length, self.chunked)
        self._headed()
        if self.sink is not None:
            self.sink.response_head(self)
        elif self.head_only:  # a HEAD response has no body whatever its headers say; not reused, to stay simple
            self._completed()

    def _read_head(self, head: bytes) -> None:
        """Status, length and chunking from a response head httptools has framed and checked."""
        self.status = self._parser.get_status_code()
        self.folded_head = folded = head.lower()
        if (at := folded.find(b"\r\ncontent-length:")) >= 0:  # one at most: httptools refuses two
            self.content_length = int(folded[at + 17:folded.find(b"\r\n", at + 17)])
        at = folded.find(b"\r\ntransfer-encoding:")
        while at >= 0:
            end = folded.find(b"\r\n", at + 20)
            if folded.find(b"chunked", at + 20, end) >= 0:  # `find`, not `in`: see fast_lane._origin_form
                self.chunked = True
            at = folded.find(b"\r\ntransfer-encoding:", end)

    def on_body(self, body: bytes) -> None:
        if self.sink is not None:
            self.sink.response_body(body)
            return
        if self.head_only:
            return
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > READ_BOUND:
            self.hold()
        self._wake()

    def on_message_complete(self) -> None:
        self._reusable = self._parser.should_keep_alive()
        self._completed()

    # the router's side ---------------------------------------------------------------------

    def hold(self) -> None:
        """Read no more from the replica for now; `let_go` reads on."""
        if not self._paused and not self.closed:
            self._paused = True
            self.transport.pause_reading()

    def let_go(self) -> None:
        if self._paused:
            self._paused = False
            if not self.closed:
                self.transport.resume_reading()

    def relay(self, request: bytes, sink: Sink) -> None:
        """Write a whole request; its response goes to `sink` as it is parsed."""
        self._reset(head_only=False, sink=sink)
        self.transport.write(request)

    async def send(self, head: bytes, body: bytes | AsyncIterator[bytes], chunked: bool) -> None:
        """Write the request, and wait for the response's head."""
        self.transport.write(head + body if isinstance(body, bytes) else head)
        if not isinstance(body, bytes):
            self._sender = asyncio.ensure_future(self._stream(body, chunked))
        if not self.headed and self._failure is None:
            self._head = asyncio.get_running_loop().create_future()
            await self._head
        if self._failure is not None:
            raise self._failure

    async def chunks(self) -> AsyncIterator[bytes]:
        """The response body as it arrives; an UpstreamError if the replica breaks it off."""
        while True:
            while self._chunks:
                chunk = self._chunks.popleft()
                self._buffered -= len(chunk)
                if self._buffered <= READ_BOUND // 2:
                    self.let_go()
                yield chunk
            if self.complete:
                return
            if self._failure is not None:
                raise self._failure
            self._wakeup = asyncio.get_running_loop().create_future()
            await self._wakeup

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])

    def release(self) -> None:
        """Done with the response: a whole one leaves the connection for reuse, anything else closes it."""
        sender, self._sender = self._sender, None
        if sender is not None and not sender.done():
            sender.cancel()
            self.close()
        elif self.complete and self._reusable and not self.closed:
            self.sink = None
            self.pool.put_back(self)
        else:
            self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    async def _stream(self, body: AsyncIterator[bytes], chunked: bool) -> None:
        try:
            async for chunk in body:
                if chunk:
                    self.transport.write(b"%x\r\n%b\r\n" % (len(chunk), chunk) if chunked else chunk)
                    if self._writable is not None:
                        await self._writable
                if self.closed:
                    return
            if chunked:
                self.transport.write(b"0\r\n\r\n")
        except BaseException:  # the client went away mid-body, or its stream failed: the replica hears of it
            self.close()
            self._fail(UpstreamError("the request body was cut short"))

    def _fail(self, failure: Exception) -> None:
        if self._failure is None:
            self._failure = failure
        self._headed()
        if self.sink is not None:
            self.sink.response_failed(self, failure)
        else:
            self._wake()

    def _headed(self) -> None:
        if self._head is not None and not self._head.done():
            self._head.set_result(None)

    def _completed(self) -> None:
        self.complete = True
        if self.sink is not None:
            self.sink.response_done(self)
        else:
            self._wake()

    def _wake(self) -> None:
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)


class Upstream:
    """Kept-alive connections to replicas, by address (host:port)."""

    def __init__(self) -> None:
        self._idle: dict[str, list[Connection]] = {}

    async def request(self, address: str, method: str, target: str, headers: list[tuple[bytes, bytes]],
                      body: bytes | AsyncIterator[bytes], length: int | None = None) -> Connection:
        """Send the request and return once the response's head is in; its body is read from the connection.

        `body` bytes go out with their length; a stream goes out with `length` when the client gave
        one, chunked otherwise. Raises UpstreamError or OSError when the replica cannot be reached.
        """
        whole = body if isinstance(body, bytes) else None
        head = request_head(method, target, address, headers, whole, length)
        chunked = whole is None and length is None
        head_only = method == "HEAD"
        reused = self.take(address)
        if reused is not None:
            reused._reset(head_only=head_only)
            try:
                await reused.send(head, body, chunked)
                return reused
            except UpstreamError:
                reused.close()
                if not isinstance(body, bytes):
                    raise  # a streamed body cannot be sent twice; bytes go again on a fresh connection
            except BaseException:
                reused.close()
                raise
        connection = await self.connect(address)
        connection.head_only = head_only
        try:
            await connection.send(head, body, chunked)
        except BaseException:
            connection.close()
            raise
        return connection

    def put_back(self, connection: Connection) -> None:
        idle = self._idle.setdefault(connection.address, [])
        if len(idle) < IDLE_PER_REPLICA:
            idle.append(connection)
        else:
            connection.close()

    async def close(self) -> None:
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()

    def take(self, address: str) -> Connection | None:
        """An idle kept-alive connection to `address`, if one is open."""
        idle = self._idle.get(address)
        while idle:
            connection = idle.pop()
            if not connection.closed and not connection.transport.is_closing():  # else the replica hung up
                return connection
        return None

    async def connect(self, address: str) -> Connection:
        host, _, port = address.rpartition(":")
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                _, connection = await loop.create_connection(lambda: Connection(self, address), host, int(port))
        except TimeoutError as error:
            raise UpstreamError(f"no connection to {address} within {CONNECT_TIMEOUT:.0f}s") from error
        return connection
