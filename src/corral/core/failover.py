"""Several controllers serving one database: the list of their URLs a worker, client or router is given, and which
one it uses now.

Sticky: the URL that answered last is used until it fails; then the next one in the list (wrapping around).
"""

from __future__ import annotations

from urllib.parse import urlsplit


def parse_urls(text: str) -> list[str]:
    """The comma-separated controller URLs of a flag or CORRAL_URL, each http(s)://host[:port]; ValueError says
    which one is wrong and why, in one line."""
    urls = [part.strip().rstrip("/") for part in text.split(",")]
    if not any(urls):
        raise ValueError("no controller URL given")
    for url in urls:
        if not url:
            raise ValueError(f"an empty controller URL in {text!r}")
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 -- raises ValueError on a port that is not a number in range
        except ValueError as error:
            raise ValueError(f"controller URL {url!r}: {error}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"controller URL {url!r} is not http(s)://host[:port]")
        if parts.path or parts.query or parts.fragment or parts.username or parts.password:
            raise ValueError(f"controller URL {url!r} has more than http(s)://host[:port]")
    if len(set(urls)) < len(urls):
        raise ValueError(f"a controller URL appears twice in {text!r}")
    return urls


class Rotation:
    """The controller in use; `failed(url)` moves to the next unless another caller already moved on from `url`."""

    def __init__(self, urls: list[str]) -> None:
        if not urls:
            raise ValueError("no controller URL given")
        self.urls = list(urls)
        self._index = 0

    @property
    def current(self) -> str:
        return self.urls[self._index]

    def failed(self, url: str) -> str:
        """The URL to use after `url` failed: the next one if `url` is still the current one, else the current."""
        if url == self.current:
            self._index = (self._index + 1) % len(self.urls)
        return self.current
