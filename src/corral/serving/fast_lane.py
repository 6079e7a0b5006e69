"""The router's fast lane: the common proxied request served from the socket's callbacks, with no ASGI cycle.

Through uvicorn and the app, a request costs a task, a scope, a handful of ASGI messages and
an awaiting upstream read: most of the router's CPU when a replica answers in a tenth of a
millisecond. The fast lane is the HTTP protocol of the router's server. It frames requests
itself and serves a proxied request (`/serve/...`, or an OpenAI POST) whose body came whole
with its head: the decision, the replica's connection and the response (streams included) all
move through callbacks, the response relayed as the replica's parser hands it on.

Anything else (another path, HEAD, a streamed or large body, `Expect`, HTTP/1.0, `Connection:
close`, a streaming OpenAI request that must wait and so is shown its queue position) hands the
connection, with its unread bytes, to uvicorn's own protocol, which serves it through the app
from then on: the general path in `proxy`, with the same answers.
"""

from __future__ import annotations

import asyncio
import functools
import http
import json
import re
import time

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from corral.metrics import ROUTER_TRAFFIC
from corral.serving import proxy
from corral.serving.access import bearer, personal
from corral.serving.host import router_host
from corral.serving.router import Router, RouterError, Waiter
from corral.serving.upstream import Connection, UpstreamError, request_head

FAST_METHODS = frozenset({b"GET", b"POST", b"PUT", b"PATCH", b"DELETE", b"OPTIONS"})
OPENAI_PATHS = frozenset(path.encode() for path in proxy.OPENAI_PATHS)
HEAD_LIMIT = 64 * 2**10  # a request head longer than this is left to uvicorn
PIPELINE_BOUND = 2**20  # bytes of pipelined requests held before reading pauses
NO_BODY_STATUSES = frozenset({204, 304})
# A response header line that stays with its hop (the leading CRLF goes with it; the status line never matches):
# found in the head in lower case, cut from the head as sent.
HOP_FIELD = re.compile(rb"\r\n(?:%b):" % b"|".join(map(re.escape, sorted(proxy.RESPONSE_DROP))))
HOP_FIELDS = re.compile(HOP_FIELD.pattern + rb"[^\r\n]*", re.IGNORECASE)


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return b"HTTP/1.1 %d %s\r\n" % (status, phrase.encode())


STATUS_LINES = {status: _status_line(status) for status in range(100, 600)}


def _origin_form(url: bytes) -> tuple[bytes, bytes] | None:
    """A request target's path and its query (with its `?`, or empty); None if it is not a plain path.

    The common target, a path and maybe a query, is split here: httptools' URL parser costs an
    object and a call on every request. Anything else (an absolute URL, a fragment) goes through it.
    Bytes are searched with `find`, not `in`: `in` first tries its operand as an integer, raising and
    clearing a TypeError each time.
    """
    if url.startswith(b"/") and url.find(b"#") < 0:
        path, mark, query = url.partition(b"?")
        return path, mark + query if query else b""
    try:
        parsed = httptools.parse_url(url)
    except httptools.HttpParserInvalidURLError:
        return None
    if not parsed.path:
        return None
    return parsed.path, b"?" + parsed.query if parsed.query else b""


class FastLane(asyncio.Protocol):
    """One client connection. `app` holds the router (`app.state.services.router`) once the server has started."""

    def __init__(self, app, *, config, server_state, app_state, _loop=None) -> None:
        self.app = app
        self.config, self.server_state, self.app_state = config, server_state, app_state
        self.loop = _loop or asyncio.get_event_loop()
        self.transport: asyncio.Transport | None = None
        self.forwarded = (b"x-forwarded-for", b"")  # the client's address, the same for every request it sends
        self.buffer = b""
        self.parser = httptools.HttpRequestParser(self)
        self.head = b""  # the last request head parsed, and what it parsed into: see `_parse_head`
        self.parsed: tuple = ()
        self.admitted: tuple = (None, "", None)  # (catalog, deployment, authorization) last let through
        self.sent: tuple = ()  # (method, target, headers, replica, body length) of the last head sent on
        self.sent_head = b""
        self.answered: tuple = (b"", b"", False)  # a replica's response head, the client's made of it, chunked
        self.exchange: Exchange | None = None
        self.router: Router | None = None  # the app's, once its server has started
        self.admin = ""
        self.idle_timer: asyncio.TimerHandle | None = None
        self.active = 0.0  # loop time of the last request's end
        self.closing = False
        self.paused = False
        self.handed_over = False

    # asyncio's side ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.server_state.connections.add(self)
        peer = transport.get_extra_info("peername")
        self.forwarded = (b"x-forwarded-for", (peer[0] if isinstance(peer, tuple) else "").encode())
        self._arm_idle_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server_state.connections.discard(self)
        self._disarm_idle_timer()
        exchange, self.exchange = self.exchange, None
        if exchange is not None:
            exchange.client_gone()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.exchange is None:
            self._next()
        elif len(self.buffer) > PIPELINE_BOUND and not self.paused:
            self.paused = True
            self.transport.pause_reading()

    def pause_writing(self) -> None:
        """The client reads slower than the replica writes: hold the replica back.

        A connection still held when its exchange ends is let go by its next use."""
        if self.exchange is not None and self.exchange.upstream is not None:
            self.exchange.upstream.hold()

    def resume_writing(self) -> None:
        if self.exchange is not None and self.exchange.upstream is not None:
            self.exchange.upstream.let_go()

    def shutdown(self) -> None:
        """The server stops: close now when idle, else once the request in hand is answered."""
        if self.exchange is None:
            self.transport.close()
        else:
            self.closing = True

    # framing -------------------------------------------------------------------------------

    def _next(self) -> None:
        """Serve the next request in the buffer if it is whole and for the fast lane; else hand the connection on."""
        if self.exchange is not None or self.handed_over:
            return  # a turn scheduled by `exchange_done` that data arriving in between already took
        if self.paused:
            self.paused = False
            self.transport.resume_reading()
        if self.transport.is_closing():
            return
        if not self.buffer:
            if self.closing:
                self.transport.close()
            self.active = self.loop.time()
            return
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > HEAD_LIMIT:
                self._hand_over()
            return
        if self.router is None and (host := router_host(self.app)) is not None:
            self.router, self.admin = host.router, host.tokens.admin
        request = self._parse(end + 4, self.router) if self.router is not None else None
        if request is None:
            self._hand_over()
            return
        self.exchange = request
        request.start()

    def _parse(self, head_end: int, router: Router) -> Exchange | None:
        """The request at the buffer's start as an exchange, consumed from the buffer; None if it is not for us."""
        head = self.buffer[:head_end]
        repeated = head == self.head  # the client sends its last head again: it parses the same
        parsed = self.parsed if repeated else self._parse_head(head)
        if parsed is None:
            return None
        method, name, target, headers, authorization, length = parsed
        end = head_end + length
        if length > proxy.WHOLE_BODY or len(self.buffer) < end:
            return None  # a body that did not come whole with its head is streamed by the general path
        body = self.buffer[head_end:end]
        refused = None
        if name is None:  # an OpenAI request: its body names the model
            route = proxy.model_route(router, body)
            if isinstance(route, proxy.Refusal):
                name, refused = "", route
            elif route[1].get("stream") is True and router.scheduler.waits(route[0]):
                return None  # a streaming request that waits shows its queue position: the general path does that
            else:
                name = route[0]
        if refused is None:
            refused = self._refusal(router, name, authorization)
            if refused is not None and personal(bearer(authorization)):
                return None  # a personal token is judged against the store: the general path awaits that
        if not repeated:
            if body:  # the parser reads past the body to the next message's start, as it did for the last head
                self.parser.feed_data(body)
            self.head, self.parsed = head, parsed
        self.buffer = self.buffer[end:]
        return Exchange(self, router, name, method, target, headers, body, refused)

    def _parse_head(self, head: bytes) -> tuple[str, str | None, str, tuple, str | None, int] | None:
        """A head for the fast lane as (method, deployment or None for an OpenAI path, target, headers to pass on,
        authorization, body length); None if the fast lane does not serve it.

        Once its body is fed too, the parser is back at a message's start, where it read this head: the same
        head again would parse the same, so `_parse` keeps the last one's answer and asks no parser for it."""
        self._url, self._headers, self._authorization, self._plain, self._length = b"", [], None, True, 0
        try:
            self.parser.feed_data(head)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):  # not one kind: uvicorn answers both
            return None
        parser = self.parser
        method = parser.get_method()
        if method not in FAST_METHODS or not self._plain or parser.get_http_version() != "1.1":
            return None
        target = _origin_form(self._url)
        if target is None:
            return None
        path, query = target
        if path.find(b"%") >= 0:  # `find`, not `in`: see `_origin_form`
            return None  # percent-encoded paths take the general path's decoding
        if path.startswith(b"/serve/"):
            deployment, slash, rest = path[7:].partition(b"/")
            if not deployment or not slash:
                return None
            name, target = deployment.decode("latin-1"), "/" + (rest + query).decode("latin-1")
        elif method == b"POST" and path in OPENAI_PATHS:
            name, target = None, (path + query).decode("latin-1")
        else:
            return None
        return method.decode(), name, target, tuple(self._headers), self._authorization, self._length

    def _refusal(self, router: Router, name: str, authorization: str | None) -> proxy.Refusal | None:
        """`proxy.refusal`, asked once per catalog, deployment and key on a connection: a client sends its key
        again with every request, and the answer changes only with the catalog (its facts are immutable)."""
        admitted = self.admitted
        if admitted[0] is router.catalog and admitted[1] == name and admitted[2] == authorization:
            return None
        refused = proxy.refusal(router, name, authorization, self.admin)
        if refused is None:
            self.admitted = (router.catalog, name, authorization)
        return refused

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_headers_complete(self) -> None:
        """Read here: a message without a body is complete at once, and the parser forgets its flags."""
        if not self.parser.should_keep_alive() or self.parser.should_upgrade():
            self._plain = False

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name not in proxy.HOP_BY_HOP:  # most headers: one look-up
            self._headers.append((name, value))
        elif name in (b"transfer-encoding", b"expect", b"upgrade"):
            self._plain = False
        elif name == b"content-length":
            self._length = int(value) if value.isdigit() else proxy.MAX_BODY
        elif name == b"authorization":
            self._authorization = value.decode("latin-1")

    def _hand_over(self) -> None:
        """uvicorn's protocol serves this connection from here on, starting with the bytes not yet answered."""
        self._disarm_idle_timer()
        self.handed_over = True
        self.server_state.connections.discard(self)
        protocol = HttpToolsProtocol(config=self.config, server_state=self.server_state, app_state=self.app_state,
                                     _loop=self.loop)
        self.transport.set_protocol(protocol)
        protocol.connection_made(self.transport)
        if self.buffer:
            protocol.data_received(self.buffer)
        self.buffer = b""

    # answering -----------------------------------------------------------------------------

    def answer(self, refused: proxy.Refusal) -> None:
        body = json.dumps(refused.body()).encode()
        head = b"content-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
        self.transport.write(STATUS_LINES[refused.status] + head + body)

    def exchange_done(self) -> None:
        self.exchange = None
        if self.buffer:  # pipelined: served on the next turn, outside the replica's parser callbacks
            self.loop.call_soon(self._next)
        else:
            self._next()

    def _arm_idle_timer(self) -> None:
        """One timer per connection, not one per request: when it fires early it sets itself again."""
        self.active = self.loop.time()
        self.idle_timer = self.loop.call_later(self.config.timeout_keep_alive, self._idle)

    def _disarm_idle_timer(self) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None

    def _idle(self) -> None:
        """Close a connection idle for the keep-alive timeout (uvicorn's own, as for the app's connections)."""
        left = self.active + self.config.timeout_keep_alive - self.loop.time()
        if self.exchange is not None or self.buffer or left > 0:
            self.idle_timer = self.loop.call_later(max(left, 0.0) or self.config.timeout_keep_alive, self._idle)
        elif not self.transport.is_closing():
            self.transport.close()


class Exchange:
    """One request in the fast lane, from the scheduler's decision to the last byte of its response."""

    __slots__ = ("lane", "router", "deployment", "method", "target", "headers", "body", "started", "refused", "waiter",
                 "granted", "endpoint", "upstream", "request", "reused", "answering", "chunked", "out", "ended")

    def __init__(self, lane: FastLane, router: Router, deployment: str, method: str, target: str,
                 headers: list[tuple[bytes, bytes]], body: bytes, refused: proxy.Refusal | None) -> None:
        self.lane, self.router, self.deployment = lane, router, deployment
        self.method, self.target, self.headers, self.body = method, target, headers, body
        self.started = time.perf_counter()
        self.refused = refused  # answered by the router itself: a bad key, deployment or model
        self.waiter: Waiter | None = None
        self.granted = False
        self.endpoint = None
        self.upstream: Connection | None = None
        self.request = b""
        self.reused = False
        self.answering = False  # the response's head went to the client: no error can replace it now
        self.chunked = False
        self.out: list[bytes] = []  # response bytes not yet written: see `flush`
        self.ended = False

    def start(self) -> None:
        if self.refused is not None:
            self._refuse(self.refused)
            return
        if self.router.scheduler.grant_at_once(self.deployment):  # the common request: no waiter, no future
            self._serve()
            return
        self.waiter = self.router.submit(self.deployment, self.lane.loop)
        if self.waiter.future.done():
            self._decided()
        else:
            self.waiter.future.add_done_callback(self._decided_later)

    def _decided_later(self, future: asyncio.Future) -> None:
        if self.lane.exchange is self:  # else the client left, and `client_gone` gave the grant back
            self._decided()

    def _decided(self) -> None:
        try:
            self.waiter.future.result()
        except RouterError as failure:
            ROUTER_TRAFFIC.record(self.deployment, failure.status)
            self._refuse(proxy.Refusal(failure.status, failure.reason))
            return
        self._serve()

    def _serve(self) -> None:
        """Granted: to the least loaded healthy replica, on a kept-alive connection when one is idle."""
        self.granted = True
        self.endpoint = self.router.pick(self.deployment)
        if self.endpoint is None:
            self.router.finished(self.deployment, None)
            ROUTER_TRAFFIC.record(self.deployment, 503)
            self._refuse(proxy.Refusal(503, f"{self.deployment} has no healthy replica"))
            return
        address = self.endpoint.address
        lane = self.lane
        sent = (self.method, self.target, self.headers, address, len(self.body))
        if sent != lane.sent:  # else the head this replica got last from this client, which a repeated head gets
            lane.sent = sent
            lane.sent_head = request_head(self.method, self.target, address, [*self.headers, lane.forwarded],
                                          self.body, None)
        self.request = lane.sent_head + self.body
        connection = self.router.upstream.take(address)
        if connection is None:
            self._connect()
        else:
            self.reused = True
            self._send(connection)

    def _refuse(self, refused: proxy.Refusal) -> None:
        """Answered by the router: the exchange is over."""
        self.ended = True
        self.lane.answer(refused)
        self.lane.exchange_done()

    def _connect(self) -> None:
        self.reused = False
        task = self.lane.loop.create_task(self.router.upstream.connect(self.endpoint.address))
        task.add_done_callback(self._connected)

    def _connected(self, task: asyncio.Task) -> None:
        failure = None if task.cancelled() else task.exception()
        if self.ended:  # the client left while the connection opened
            if failure is None and not task.cancelled():
                task.result().close()
            return
        if failure is not None or task.cancelled():
            self._upstream_failed(failure or UpstreamError("the connection was cancelled"))
            return
        self._send(task.result())

    def _send(self, connection: Connection) -> None:
        self.upstream = connection
        connection.relay(self.request, self)

    # the replica's response (a Sink) -------------------------------------------------------

    def response_head(self, connection: Connection) -> None:
        """The client's response head: the replica's own, its header lines passed on as they came, less the
        hop-by-hop ones (one search over its bytes), under our status line; chunked when it gives no length."""
        lane = self.lane
        if connection.head == lane.answered[0]:  # a replica tends to send the same head again
            _, answer, self.chunked = lane.answered
        else:
            answer = self._answer(connection)
            lane.answered = (connection.head, answer, self.chunked)
        self.answering = True
        self.out.append(answer)

    def _answer(self, connection: Connection) -> bytes:
        """The client's response head made of the replica's; sets `chunked`."""
        status = connection.status
        head = connection.head
        if HOP_FIELD.search(connection.folded_head) is not None:  # rare: most replicas send none of them
            head = HOP_FIELDS.sub(b"", head)
        fields = head[head.find(b"\r\n") + 2:]  # from the first header line to the blank line
        if connection.content_length is None and status not in NO_BODY_STATUSES and status >= 200:
            self.chunked = True
            fields = fields[:-2] + b"transfer-encoding: chunked\r\n\r\n"
        return (STATUS_LINES.get(status) or _status_line(status)) + fields

    def response_body(self, body: bytes) -> None:
        self.out.append(b"%x\r\n%b\r\n" % (len(body), body) if self.chunked else body)

    def flush(self) -> None:
        """What the replica's bytes just parsed into goes to the client in one write (one system call)."""
        if self.out:
            self.lane.transport.write(b"".join(self.out) if len(self.out) > 1 else self.out[0])
            self.out.clear()

    def response_done(self, connection: Connection) -> None:
        if self.ended:
            return
        if self.chunked:
            self.out.append(b"0\r\n\r\n")
        self.flush()
        connection.release()
        self._end(connection.status)
        self.lane.exchange_done()

    def response_failed(self, connection: Connection, failure: UpstreamError) -> None:
        connection.close()
        if self.ended:
            return
        if self.reused and not self.answering:
            self._connect()  # a kept-alive connection the replica had closed: the whole request goes again
            return
        self._upstream_failed(failure)

    def _upstream_failed(self, failure: BaseException) -> None:
        if self.answering:  # the response broke off half-way: the client sees it cut short
            self.flush()
            self._end(self.upstream.status)
            self.lane.transport.close()
            return
        self._end(502)
        self._refuse(proxy.Refusal(502, f"replica {self.endpoint.replica_id} of {self.deployment} failed: {failure}"))

    # the client's side ---------------------------------------------------------------------

    def client_gone(self) -> None:
        """The client closed its connection: leave the queue, or give the grant back and cut the replica off."""
        if self.ended:
            return
        if not self.granted:
            self.router.abandon(self.waiter)
            self.ended = True
            return
        if self.upstream is not None:
            self.upstream.close()
        self._end(self.upstream.status if self.answering else 499)

    def _end(self, status: int) -> None:
        if self.ended:
            return
        self.ended = True
        self.router.finished(self.deployment, self.endpoint)
        ROUTER_TRAFFIC.record(self.deployment, status, time.perf_counter() - self.started if self.answering else None)


def protocol_for(app) -> functools.partial:
    """The `http` protocol to give uvicorn for a server whose app runs a router."""
    return functools.partial(FastLane, app)
