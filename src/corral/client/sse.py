"""Server-sent events: the parser of the `text/event-stream` format, the plan that follows the event stream, and
the wait for a job's end that follows it.

The one parser of the clients (`Client.events`, `AsyncClient.events` and `corral events`); the
plan is driven by both clients like every other plan (see `plans`), so the reconnect rules are
written once.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from corral.client.errors import CorralError
from corral.client.plans import NEXT_LINE, Call, Item, Open, Plan, Sleep, Step, get
from corral.core.states import JOB_ACTIVE, JOB_STATE_HEADER, JOB_TERMINAL

if TYPE_CHECKING:
    from corral.core.views import JobView

EVENTS_PATH = "/api/v1/events"
RECONNECTS = 5  # a dropped stream is resumed from the last id this many times in a row before giving up
FIRST_DELAY = 0.2  # seconds before reconnecting after a clean end, unless the server's `retry:` says otherwise
MAX_DELAY = 5.0


@dataclass(frozen=True)
class Event:
    """One event: its id (to resume from), its type, and its data (JSON decoded when it is JSON)."""

    id: str | None
    type: str
    data: Any


class EventParser:
    """Fields accumulate until a blank line ends the event, as the format's rules say:

    1. a line starting with `:` is a comment (a keep-alive);
    2. `data:` lines are joined with newlines; an event without data is not dispatched;
    3. `event:` names the type (default, and when empty, "message"), for this event only;
    4. `id:` sets the id of this event and of those after it (ignored if it holds NUL); `last_id` is the id of
       the last event dispatched, so a stream dropped mid-event resumes before that event;
    5. `retry:` with only digits sets the reconnection delay, in milliseconds;
    6. one space after the colon is dropped; a line without a colon is a field with an empty value;
    7. a byte order mark before the first line is dropped.

    Lines come split at CRLF, LF or CR (the sessions' `iter_lines`); the dashboard's parser (static/app.js) splits
    and reads them by the same rules.
    """

    def __init__(self, last_id: str | None = None) -> None:
        self.last_id = self._id = last_id
        self.retry: float | None = None  # seconds
        self._type = ""
        self._data: list[str] = []
        self._first = True

    def feed(self, line: str) -> Event | None:
        if self._first:
            line, self._first = line.removeprefix("\ufeff"), False
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
            self._id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self.retry = int(value) / 1000
        return None

    def _dispatch(self) -> Event | None:
        self.last_id = self._id
        if not self._data:
            self._type = ""
            return None
        text = "\n".join(self._data)
        try:
            data = json.loads(text)
        except ValueError:
            data = text
        event = Event(self.last_id, self._type or "message", data)
        self._type, self._data = "", []
        return event


def stream_request(params: dict[str, Any], last_event_id: str | None) -> Call:
    """A (re)connection: the id to resume after goes as Last-Event-ID, and as `after` for proxies that drop it."""
    query = {k: v for k, v in params.items() if v is not None}
    headers = {"Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
        if last_event_id.isdigit():
            query["after"] = last_event_id
    return Call("GET", EVENTS_PATH, params=query, headers=headers)


def reconnect_delay(failures: int, retry: float | None = None) -> float:
    """The pause before reconnecting: the server's `retry` (else FIRST_DELAY) after a clean end, doubling with
    each failure in a row, at most MAX_DELAY."""
    return min((FIRST_DELAY if retry is None else retry) * 2 ** failures, MAX_DELAY)


def follow_events(params: dict[str, Any], last_event_id: str | None = None, follow: bool = True,
                  reconnects: int | None = RECONNECTS) -> Plan[None]:
    """Events as they come (`Item(Event)`), resumed after the last id seen when the stream drops.

    1. Connect, resuming after `last_event_id` once there is one; an HTTP error is raised.
    2. Hand out each event as it is parsed.
    3. A clean end: without `follow`, done; with it, connect again after a pause.
    4. A failed connection or a dropped stream: without `follow`, raised; with it, connect again after a
       growing pause, and raise after `reconnects` failures in a row (None: never).
    """
    last_id, retry, failures = last_event_id, None, 0
    while True:
        parser = EventParser(last_id)  # what a dropped stream left half-sent is discarded
        try:
            yield Open(stream_request({**params, "follow": follow}, last_id))
            failures = 0
            while (line := (yield NEXT_LINE)) is not None:
                event = parser.feed(line)
                if event is not None:
                    yield Item(event)
            if not follow:
                return
        except CorralError as error:
            if error.status is not None or not follow:
                raise
            failures += 1
            if reconnects is not None and failures > reconnects:
                raise
        last_id, retry = parser.last_id, parser.retry or retry
        yield Sleep(reconnect_delay(failures, retry))


def ends_job(event: Event, job_id: int) -> bool:
    """Whether `event` is the job's own move to a terminal state."""
    data = event.data if isinstance(event.data, dict) else {}
    return data.get("job_id") == job_id and data.get("task_id") is None and data.get("to_state") in JOB_TERMINAL


def wait(job_id: int, timeout: float | None = None, rows: bool = False) -> Plan[JobView]:
    """The job once it is terminal, told by its event stream rather than by polling; TimeoutError after `timeout`.
    With `rows`, the job as the controller's JSON object.

    1. Open the job's event stream from its newest event on (what came before is in the job's state).
    2. Once it is open, the job's state as the controller read it after fixing the stream's start (its
       JOB_STATE_HEADER): an end is the job's answer, read now. A controller that does not say is asked.
    3. Else follow the events until the job's move to a terminal state, and read the job then. A dropped
       stream is resumed after the last event seen (`follow_events`), so the move is not missed.
    With a `timeout`, no read of the stream waits past it.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    events = follow_events({"job": job_id, "last": 1})
    reply: Any = None
    failure: CorralError | None = None
    checked = False
    while True:
        step = events.throw(failure) if failure is not None else events.send(reply)
        reply, failure = None, None
        if isinstance(step, Item):
            if ends_job(step.value, job_id):
                return (yield from get(job_id, rows))
            continue
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"job {job_id} did not end within {timeout}s")
            step = bounded(step, left)
        try:
            reply = yield step
        except CorralError as error:
            failure = error
            continue
        if isinstance(step, Open) and not checked:
            checked = True
            if reply.get(JOB_STATE_HEADER) not in JOB_ACTIVE:
                job = yield from get(job_id, rows)
                if (job["state"] if rows else job.state) in JOB_TERMINAL:
                    return job


def bounded(step: Step, seconds: float) -> Step:
    """A step that waits at most `seconds`: a shorter sleep, or a stream whose reads time out then."""
    if isinstance(step, Sleep):
        return Sleep(min(step.seconds, seconds))
    if isinstance(step, Open):
        call = step.call
        return Open(Call(call.method, call.path, ok=call.ok, timeout=seconds, **call.kwargs))
    return step
