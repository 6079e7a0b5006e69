"""One error type for everything the client can hit, with a message a person can act on."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported by `corral --help` too, which must not load pydantic
    from pydantic import ValidationError


class CorralError(Exception):
    """An API error (`status` is the HTTP status, `detail` the server's as it came) or a local one (`status` is
    None)."""

    def __init__(self, status: int | None, message: str, detail: object = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.detail = detail

    def __str__(self) -> str:
        return self.message


class Unanswered(Exception):
    """A request that got no answer: the controller unreachable, gone mid-way or too slow. `sent` is False when
    the request never left (no connection), so that it may go to another controller whatever it was."""

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


def format_detail(detail: object) -> str:
    """FastAPI's `detail`: a string, or for a 422 a list of pydantic errors, joined as `loc: msg`."""
    if isinstance(detail, list):
        return "; ".join(_format_item(item) for item in detail) or "invalid request"
    return str(detail)


def format_validation(error: ValidationError) -> str:
    """A local pydantic ValidationError, in the same `field: message` form as the server's 422."""
    return "; ".join(_format_item(item) for item in error.errors()) or str(error)


def _format_item(item: object) -> str:
    if not isinstance(item, dict):
        return str(item)
    loc = [str(part) for part in item.get("loc") or ()]
    if loc and loc[0] in ("body", "query", "path", "header"):
        loc = loc[1:]  # where FastAPI found the field says nothing to the user
    msg = str(item.get("msg", "invalid"))
    msg = msg.removeprefix("Value error, ")
    return f"{'.'.join(loc)}: {msg}" if loc else msg

