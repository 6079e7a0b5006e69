"""Reading the controller's event stream (server-sent events), resuming after a dropped connection."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import httpx

from corral.client.errors import CorralError
from corral.core.views import EventView

if TYPE_CHECKING:
    from corral.client.http import Client

RECONNECT_DELAY = 1.0


def parse_sse(lines: Iterable[str]) -> Iterator[dict[str, str]]:
    """Fields of each event (`id`, `event`, `data`); comments and `retry:` lines are skipped."""
    fields: dict[str, str] = {}
    for line in lines:
        if not line:
            if "data" in fields:
                yield fields
            fields = {}
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data" and "data" in fields:
            fields["data"] += "\n" + value
        elif name in ("id", "event", "data"):
            fields[name] = value


def stream_events(client: Client, params: dict[str, Any], follow: bool) -> Iterator[EventView]:
    """Events as they come; following, a dropped connection is resumed from the last id seen."""
    last_id: int | None = None
    while True:
        headers = {} if last_id is None else {"Last-Event-ID": str(last_id)}
        try:
            with client.stream("GET", "/api/v1/events", params={**params, "follow": follow}, headers=headers) as r:
                for fields in parse_sse(r.iter_lines()):
                    event = EventView.model_validate(json.loads(fields["data"]))
                    last_id = event.id
                    yield event
            if not follow:
                return
        except httpx.TransportError as error:
            if not follow:
                raise CorralError(None, f"the event stream from {client.url} broke: {error}") from None
        except CorralError as error:
            if not follow or error.status is not None:
                raise
        time.sleep(RECONNECT_DELAY)
