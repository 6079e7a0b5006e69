"""The sync client's HTTP through httpx: https:// controllers, proxies, and a transport given (the tests' fakes).

The same two calls as `client.plain`'s session, and the same error: httpx's transport errors become `Unanswered`,
here and in `AsyncClient`, so that one rule (`http.resendable`) decides what may go to another controller.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httpx

from corral.client.errors import Unanswered

NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def tls_verification(urls: list[str]) -> ssl.SSLContext | bool:
    """True where an https:// controller is among them: httpx checks its certificate against the certificate
    store. An http:// one speaks no TLS, so it gets a context that trusts nothing rather than a store loaded for
    nothing (a tenth of a CLI command's start)."""
    return True if any(url.startswith("https://") for url in urls) else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def unanswered(error: httpx.TransportError) -> Unanswered:
    return Unanswered(str(error) or type(error).__name__, sent=not isinstance(error, NEVER_SENT))


class HttpxSession:
    def __init__(self, headers: Mapping[str, str], timeout: float, transport: httpx.BaseTransport | None,
                 verify: ssl.SSLContext | bool) -> None:
        self._http = httpx.Client(headers=headers, timeout=timeout, transport=transport, verify=verify)
        self.timeout = timeout

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._http.request(method, url, **kwargs)
        except httpx.TransportError as error:
            raise unanswered(error) from None

    @contextmanager
    def stream(self, method: str, url: str, read_timeout: float | None, **kwargs: Any) -> Iterator[Streamed]:
        timeout = httpx.Timeout(self.timeout, read=read_timeout)
        try:
            with self._http.stream(method, url, timeout=timeout, **kwargs) as response:
                yield Streamed(response)
        except httpx.TransportError as error:
            raise unanswered(error) from None

    def close(self) -> None:
        self._http.close()


class Streamed:
    """A streamed httpx response whose reads, failing mid-way, raise `Unanswered` as the plain session's do."""

    def __init__(self, response: httpx.Response) -> None:
        self._response = response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._response, name)

    def iter_lines(self) -> Iterator[str]:
        try:
            yield from self._response.iter_lines()
        except httpx.TransportError as error:
            raise unanswered(error) from None
