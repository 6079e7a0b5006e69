"""The sync client's HTTP to a plain http:// controller, on the standard library's http.client alone.

httpx's package imports urllib.request, ssl, logging, its models and its multipart encoders: more than half of
what a CLI command imports beside click and the interpreter, and more than the rest of the client together. A
controller reached by plain HTTP with no proxy variable set needs none of it, so `Client` talks to it through
this session: requests with a JSON body, a query and headers, and responses read whole or line by line as a
stream. Everything else (https://, proxies, a transport given for tests) goes through httpx
(`client.httpx_session`). Both sessions raise `Unanswered` for a request that got no answer, so failing over to
the next controller is one rule.
"""

from __future__ import annotations

import codecs
import http.client
import json
import os
import re
import select
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from corral.client.errors import Unanswered

CHUNK = 65536
FAILURES = (OSError, http.client.HTTPException)  # what sending or reading can raise: the controller gone, a timeout
LINE_END = re.compile(r"\r\n|\r|\n")
PATH_SAFE = "/%:@!$&'()*+,;=-._~"  # kept as they are in a path; anything else (a space, a non-ASCII letter) is quoted


def plain_and_direct(urls: list[str]) -> bool:
    """Whether every controller is plain http:// and no proxy variable (http_proxy, no_proxy, ...) is set: where
    this session sends what httpx would."""
    return all(url.startswith("http://") for url in urls) and \
        not any(name.lower().endswith("_proxy") for name in os.environ)


def query_text(params: Mapping[str, Any]) -> str:
    """A query as httpx writes one: a list is its key repeated, True and False are `true` and `false`."""
    def text(value: Any) -> str:
        return "true" if value is True else "false" if value is False else "" if value is None else str(value)

    return urlencode([(key, text(item)) for key, value in params.items()
                      for item in (value if isinstance(value, list | tuple) else [value])])


class Headers(dict):
    """An answer's headers, looked up whatever the case of their names, as httpx's are: a missing one is a KeyError
    (http.client's own gives None); one sent twice is its values joined by commas."""

    def __init__(self, items: list[tuple[str, str]]) -> None:
        super().__init__()
        for name, value in items:
            name = name.lower()
            super().__setitem__(name, f"{super().__getitem__(name)}, {value}" if super().__contains__(name) else value)

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())

    def get(self, name: str, default: Any = None) -> Any:
        return super().get(name.lower(), default)


class PlainResponse:
    """What the plans read of an answer: its status, headers, body (whole, or line by line while streamed)."""

    def __init__(self, reply: http.client.HTTPResponse, release: Callable[[bool], None]) -> None:
        self.status_code = reply.status
        self.reason_phrase = reply.reason
        self.headers = Headers(reply.getheaders())
        self._reply, self._release, self._content = reply, release, None

    def read(self) -> bytes:
        if self._content is None:
            try:
                self._content = self._reply.read()
            except FAILURES as error:
                self.close()
                raise unanswered(error) from None
            self.close(finished=True)
        return self._content

    @property
    def content(self) -> bytes:
        return self.read()

    @property
    def text(self) -> str:
        return self.read().decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.read())

    def iter_lines(self) -> Iterator[str]:
        """The body's lines as they arrive, split at CRLF, LF or CR, without their ends."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending = ""
        try:
            while chunk := self._reply.read1(CHUNK):
                pending += decoder.decode(chunk)
                held = pending.endswith("\r")  # maybe the first half of a CRLF: kept until the next chunk
                *lines, pending = LINE_END.split(pending[:-1] if held else pending)
                yield from lines
                pending += "\r" if held else ""
        except FAILURES as error:
            raise unanswered(error) from None
        self.close(finished=True)
        *lines, last = LINE_END.split(pending + decoder.decode(b"", final=True))
        yield from lines
        if last:
            yield last

    def close(self, finished: bool = False) -> None:
        """Done with the answer: its connection serves the next request if the body was read to its `finished`
        end; else it is closed, for the rest of the body would come before the next answer."""
        release, self._release = self._release, None
        if release is not None:
            release(finished)


class PlainSession:
    """HTTP/1.1 over http.client, a kept-alive connection per controller (more while a stream holds one)."""

    def __init__(self, headers: Mapping[str, str], timeout: float) -> None:
        self._headers, self.timeout = dict(headers), timeout
        self._idle: dict[tuple[str, int], list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()  # a client may be shared between threads

    def request(self, method: str, url: str, *, timeout: float | None = None, **kwargs: Any) -> PlainResponse:
        response = self._send(method, url, timeout or self.timeout, timeout or self.timeout, **kwargs)
        response.read()
        return response

    @contextmanager
    def stream(self, method: str, url: str, read_timeout: float | None, **kwargs: Any) -> Iterator[PlainResponse]:
        """The answer with its body unread, read no longer than `read_timeout` at a time (None: any time)."""
        response = self._send(method, url, self.timeout, read_timeout, **kwargs)
        try:
            yield response
        finally:
            response.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()

    def _send(self, method: str, url: str, connect_timeout: float | None, read_timeout: float | None, *,
              params: Mapping[str, Any] | None = None, json: Any = None, content: bytes | None = None,
              headers: Mapping[str, str] | None = None) -> PlainResponse:
        parts = urlsplit(url)
        origin = (parts.hostname or "", parts.port or 80)
        query = "&".join(part for part in (parts.query, query_text(params) if params else "") if part)
        target = quote(parts.path, safe=PATH_SAFE) + (f"?{query}" if query else "")
        head = {**self._headers, **(headers or {})}
        if json is not None:
            content = dumps(json)
            head.setdefault("Content-Type", "application/json")
        connection = self._connection(origin, connect_timeout)
        try:
            connection.sock.settimeout(connect_timeout)
            connection.putrequest(method, target, skip_accept_encoding=True)
            for name, value in head.items():
                connection.putheader(name, value)
            if content is not None or method in ("POST", "PUT", "PATCH"):
                connection.putheader("Content-Length", str(len(content or b"")))
            connection.endheaders(content or None)
            connection.sock.settimeout(read_timeout)
            reply = connection.getresponse()
        except FAILURES as error:
            connection.close()
            raise unanswered(error) from None
        return PlainResponse(reply, lambda finished: self._release(origin, connection, reply, finished))

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
            raise Unanswered(str(error) or type(error).__name__, sent=False) from None
        return connection

    def _release(self, origin: tuple[str, int], connection: http.client.HTTPConnection,
                 reply: http.client.HTTPResponse, finished: bool) -> None:
        if finished and not reply.will_close and connection.sock is not None:
            with self._lock:
                self._idle.setdefault(origin, []).append(connection)
        else:
            reply.close()
            connection.close()


def dumps(value: Any) -> bytes:
    """A JSON body as httpx writes one: compact, UTF-8, no NaN."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def readable(sock: socket.socket) -> bool:
    """Whether `sock` has something to read (or its end) right now."""
    if hasattr(select, "poll"):  # any descriptor number, unlike select()
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([sock], [], [], 0)[0])


def unanswered(error: Exception) -> Unanswered:
    """What sending or reading raised, after the request may have reached the controller."""
    return Unanswered(str(error) or type(error).__name__, sent=True)
