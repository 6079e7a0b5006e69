"""Server-sent events: the parser of the `text/event-stream` format, fed one line at a time."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

EVENTS_PATH = "/api/v1/events"
RECONNECTS = 5  # a dropped stream is resumed from the last id this many times in a row before giving up


@dataclass(frozen=True)
class Event:
    """One event: its id (to resume from), its type, and its data (JSON decoded when it is JSON)."""

    id: str | None
    type: str
    data: Any


class EventParser:
    """Fields accumulate until a blank line ends the event; comments (`:`) are keep-alives."""

    def __init__(self) -> None:
        self.last_id: str | None = None
        self._type = "message"
        self._data: list[str] = []

    def feed(self, line: str) -> Event | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._type = value
        elif name == "id" and "\0" not in value:
            self.last_id = value
        return None

    def _dispatch(self) -> Event | None:
        if not self._data:
            self._type = "message"
            return None
        text = "\n".join(self._data)
        try:
            data = json.loads(text)
        except ValueError:
            data = text
        event = Event(self.last_id, self._type, data)
        self._type, self._data = "message", []
        return event


def stream_request(job: int | None, last_event_id: str | None) -> tuple[dict, dict]:
    """The query parameters and headers of a (re)connection; the id to resume after goes both ways."""
    params: dict = {"job": job} if job is not None else {}
    headers = {"Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
        params["last_event_id"] = last_event_id
    return params, headers


def reconnect_delay(failures: int) -> float:
    """The pause before reconnecting: short after a clean end, growing with failures in a row."""
    return min(0.2 * 2 ** failures, 5.0)
