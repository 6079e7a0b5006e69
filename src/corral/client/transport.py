"""The sync client's transport to a plain http:// controller, on the standard library's http.client.

httpx's own transport imports httpcore and h11, and a client that may look for proxies in the environment
imports urllib.request: together a third of `corral jobs`. A controller reached by plain HTTP with no proxy
variable set needs neither, so `Client` sends through this one there: httpx still builds the requests and reads
the responses (one client, one set of errors), and only the bytes go through http.client. Errors are httpx's
transport errors, so failing over to the next controller works as with httpx's transport.
"""

from __future__ import annotations

import http.client
import os
import select
import socket
import threading
from collections.abc import Iterator

import httpx

CHUNK = 65536
FAILURES = (OSError, http.client.HTTPException)  # what sending or reading can raise: the controller gone, a timeout


def plain_and_direct(urls: list[str]) -> bool:
    """Whether every controller is plain http:// and no proxy variable (http_proxy, no_proxy, ...) is set: where
    this transport sends what httpx's own would."""
    return all(url.startswith("http://") for url in urls) and \
        not any(name.lower().endswith("_proxy") for name in os.environ)


class StdlibTransport(httpx.BaseTransport):
    """HTTP/1.1 over http.client, a kept-alive connection per controller (more while a stream holds one)."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int], list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()  # httpx's client may be shared between threads

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        timeout = request.extensions.get("timeout", {})
        origin = (request.url.host, request.url.port or 80)
        connection = self._connection(origin, timeout.get("connect"))
        body = request.read()
        try:
            connection.sock.settimeout(timeout.get("write"))
            connection.putrequest(request.method, request.url.raw_path.decode("ascii"), skip_host=True,
                                  skip_accept_encoding=True)
            for name, value in request.headers.multi_items():
                connection.putheader(name, value)
            connection.endheaders(body or None)
            connection.sock.settimeout(timeout.get("read"))
            reply = connection.getresponse()
        except FAILURES as error:
            connection.close()
            raise as_transport_error(error, request) from None
        return httpx.Response(reply.status, headers=reply.getheaders(),
                              stream=ReplyStream(self, origin, connection, reply, request),
                              extensions={"http_version": b"HTTP/1.1", "reason_phrase": reply.reason.encode()})

    def _connection(self, origin: tuple[str, int], timeout: float | None) -> http.client.HTTPConnection:
        """An idle connection the controller has not closed meanwhile, else a new one."""
        while True:
            with self._lock:
                idle = self._idle.get(origin)
                connection = idle.pop() if idle else None
            if connection is None:
                break
            if not readable(connection.sock):  # readable while idle: the controller closed it
                return connection
            connection.close()
        connection = http.client.HTTPConnection(*origin, timeout=timeout)
        try:
            connection.connect()
        except OSError as error:
            connection.close()
            kind = httpx.ConnectTimeout if isinstance(error, TimeoutError) else httpx.ConnectError
            raise kind(str(error) or type(error).__name__) from None
        return connection

    def release(self, origin: tuple[str, int], connection: http.client.HTTPConnection,
                reply: http.client.HTTPResponse) -> None:
        """A connection whose reply was read to its end goes back for the next request, unless it is closing."""
        if reply.isclosed() and not reply.will_close and connection.sock is not None:
            with self._lock:
                self._idle.setdefault(origin, []).append(connection)
        else:
            connection.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()


def readable(sock: socket.socket) -> bool:
    """Whether `sock` has something to read (or its end) right now."""
    if hasattr(select, "poll"):  # any descriptor number, unlike select()
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([sock], [], [], 0)[0])


class ReplyStream(httpx.SyncByteStream):
    """A reply's body as it arrives (a stream of events too); its connection is released once it is read or
    closed."""

    def __init__(self, transport: StdlibTransport, origin: tuple[str, int], connection: http.client.HTTPConnection,
                 reply: http.client.HTTPResponse, request: httpx.Request) -> None:
        self._transport, self._origin, self._connection = transport, origin, connection
        self._reply, self._request = reply, request

    def __iter__(self) -> Iterator[bytes]:
        try:
            while chunk := self._reply.read1(CHUNK):
                yield chunk
            self._reply.read()  # ends a reply read to its length, so that its connection can serve the next
        except FAILURES as error:
            self._connection.close()
            raise as_transport_error(error, self._request) from None

    def close(self) -> None:
        if not self._reply.isclosed():
            self._reply.close()
            self._connection.close()  # a reply left unread leaves bytes on the connection
        self._transport.release(self._origin, self._connection, self._reply)


def as_transport_error(error: Exception, request: httpx.Request) -> httpx.TransportError:
    """httpx's error for what sending or reading raised: a timeout, the controller gone, or not HTTP."""
    if isinstance(error, TimeoutError):
        return httpx.ReadTimeout(str(error) or "timed out", request=request)
    kind = httpx.RemoteProtocolError if isinstance(error, http.client.HTTPException | ConnectionError) else \
        httpx.ReadError
    return kind(str(error) or type(error).__name__, request=request)
