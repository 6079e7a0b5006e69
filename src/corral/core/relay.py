"""The relay: how a client reaches into a running task through the controller, while workers stay outbound-only.

A client (the CLI, the Python client, the dashboard's terminal) opens a WebSocket on the controller for one
**channel**: a task's terminal (an interactive job's PTY), an `exec` of another process in a task's environment,
or one TCP connection to a port a task listens on. The controller records the channel as an attachment, names it
with an unguessable session id, and tells the task's worker in its next heartbeat reply (a RelayOrder, woken at
once). The worker dials back a WebSocket of its own to `/api/v1/relay/{session}` and the controller pipes the two
together, frame for frame, both ways, until either side closes; then it closes the other with the same code and
reason. The controller never reads what flows: the frames below are between the client and the worker.

Frames, client to worker:
- binary: bytes for the terminal's or process's stdin, or for the TCP connection;
- text: one JSON control message: `resize` (rows, cols), `eof` (stdin is closed; a TCP half-close).

Frames, worker to client:
- terminal and exec: binary frames start with one byte naming the stream, STDOUT or STDERR (a terminal is all
  STDOUT), then its bytes; text frames are control messages: `role` (whether this client holds the keyboard: a
  terminal has one writer, the first to attach, and any number of watchers), `notice` (a line for the person,
  e.g. that the job is being preempted and how long it has), `exit` (the process ended: its code, sent before a
  normal close);
- port: binary frames are the connection's bytes, unprefixed; `eof` when the task's side half-closed.

Neither end offers compression (permessage-deflate): keystrokes gain nothing from it, and it cost the controller
half its time on a forwarded port's bytes.

Close codes: 1000 when the channel ended normally (the process exited, the connection closed), or one of
CLOSE_* below with a reason a person can read.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, TypeAdapter

from corral.core.wire import WireModel

ChannelKind = Literal["terminal", "exec", "port"]

STDOUT = 1
STDERR = 2
DETACH_KEYS = b"\x10\x11"  # Ctrl-P Ctrl-Q, as docker attach: leaves the terminal running
PORT_CHUNK = 1 << 20  # what one frame of a port channel carries at most: few frames, so bytes, not frames, cost
MAX_FRAME = 4 << 20  # the largest frame either end of a channel takes
REPLAY_BYTES = 64 * 1024  # what a terminal keeps of its latest output, shown to whoever attaches
CONNECT_TIMEOUT = 15.0  # how long the controller waits for the worker to dial back before it gives up
MAX_URL = 8000  # a channel's URL, its exec command included: the controller's WebSocket server reads 8 KiB of line
MAX_ROWS = 1000
MAX_COLS = 1000

# Close codes beyond the standard ones: 4000 + the HTTP status they mirror, so a client can say why.
CLOSE_NORMAL = 1000
CLOSE_UNAUTHORIZED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_CONFLICT = 4409  # the task is not running (yet, or any more), or the port is not the task's
CLOSE_INVALID = 4422  # a malformed request: a task index that is not a number, an empty command, a port out of range
CLOSE_UNAVAILABLE = 4503  # the worker did not dial back in time, or lost its connection
CLOSE_WORKER_ERROR = 4500  # the worker could not do it (the command cannot start, the port refused)


class Resize(WireModel):
    type: Literal["resize"] = "resize"
    rows: int = Field(..., ge=1, le=MAX_ROWS)
    cols: int = Field(..., ge=1, le=MAX_COLS)


class Eof(WireModel):
    type: Literal["eof"] = "eof"


class Role(WireModel):
    type: Literal["role"] = "role"
    writer: bool = Field(..., description="this client's keys reach the terminal; a watcher's do not")


class Notice(WireModel):
    type: Literal["notice"] = "notice"
    text: str = Field(..., max_length=2000)


class Exit(WireModel):
    type: Literal["exit"] = "exit"
    code: int | None = Field(None, description="the exit code, 128+N for a death by signal N; None when unknown")
    reason: str | None = Field(None, max_length=2000)


_ON_FIRST_USE = ConfigDict(defer_build=True)  # built by the relay's first message, not by every import of this module
ClientControl = TypeAdapter(Annotated[Resize | Eof, Field(discriminator="type")], config=_ON_FIRST_USE)
WorkerControl = TypeAdapter(Annotated[Role | Notice | Exit | Eof, Field(discriminator="type")], config=_ON_FIRST_USE)
