"""The client's end of the relay (corral.core.relay): channels into a running task through the controller.

`Relay` opens a channel WebSocket (a task's terminal, an exec, one TCP connection to a port) and turns a
refusal's close code into a CorralError a person can read. `run_terminal` drives a terminal or an exec against
byte streams (the CLI hands it the local tty), `capture_exec` collects an exec's output, and `PortForwarder`
serves a local TCP port whose every connection opens a channel of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlencode, urlsplit, urlunsplit

import websockets
from pydantic import ValidationError
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from corral.client.errors import CorralError
from corral.core.relay import (
    CLOSE_CONFLICT,
    CLOSE_FORBIDDEN,
    CLOSE_NORMAL,
    CLOSE_NOT_FOUND,
    CLOSE_UNAUTHORIZED,
    CLOSE_UNAVAILABLE,
    CLOSE_WORKER_ERROR,
    CONNECT_TIMEOUT,
    DETACH_KEYS,
    MAX_FRAME,
    MAX_URL,
    PORT_CHUNK,
    STDERR,
    Eof,
    Exit,
    Notice,
    Resize,
    Role,
    WorkerControl,
)

CHUNK = 64 * 1024  # what one binary frame carries at most from a local stream
# What a close code means when the controller gave no reason.
CLOSE_MEANINGS = {
    CLOSE_UNAUTHORIZED: "authentication failed (check CORRAL_TOKEN, or the data directory's cluster.json)",
    CLOSE_FORBIDDEN: "this token may not reach into that job",
    CLOSE_NOT_FOUND: "no such job or task",
    CLOSE_CONFLICT: "the task is not running",
    CLOSE_UNAVAILABLE: "the task's worker did not answer in time",
    CLOSE_WORKER_ERROR: "the worker could not do it",
}


def close_error(code: int | None, reason: str | None) -> CorralError:
    """A channel closed by a code other than 1000, as an error: the controller's reason, else the code's meaning."""
    reason = (reason or "").strip()
    if not reason:
        return CorralError(code, CLOSE_MEANINGS.get(code or 0, f"the channel closed unexpectedly (code {code})"))
    if code == CLOSE_UNAUTHORIZED:
        return CorralError(code, f"authentication failed: {reason} (check CORRAL_TOKEN, or the data directory's "
                                 "cluster.json)")
    return CorralError(code, reason)


def closed_error(closed: ConnectionClosed) -> CorralError | None:
    """None when the channel ended normally, else why it did not."""
    if closed.rcvd is None:
        return CorralError(None, "the connection to the controller was lost")
    if closed.rcvd.code == CLOSE_NORMAL:
        return None
    return close_error(closed.rcvd.code, closed.rcvd.reason)


def websocket_url(base: str, path: str, params: Mapping[str, Any] | Sequence[tuple[str, Any]] = ()) -> str:
    """`http(s)://host/prefix` + path + query, as ws(s)://."""
    parts = urlsplit(base)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    items = params.items() if isinstance(params, Mapping) else params
    query = urlencode([(k, _query_value(v)) for k, v in items if v is not None])
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + path, query, ""))


def _query_value(value: Any) -> str:
    return ("1" if value else "0") if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class Relay:
    """Where the controller is and how to authenticate to it: what opens channels."""

    url: str
    token: str | None

    def terminal_path(self, job_id: int, task: int) -> str:
        return f"/api/v1/jobs/{job_id}/tasks/{task}/terminal"

    @contextlib.asynccontextmanager
    async def channel(self, path: str, params: Mapping[str, Any] | Sequence[tuple[str, Any]] = ()
                      ) -> AsyncIterator[ClientConnection]:
        """An open channel; closed (normally) when the block ends."""
        url = websocket_url(self.url, path, params)
        if len(url) > MAX_URL:  # the server would not answer such a request line at all
            raise CorralError(None, f"the request is too long for a channel ({len(url)} bytes of URL, at most "
                                    f"{MAX_URL}): put a long command in a script and run that")
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            connection = await websockets.connect(url, additional_headers=headers, max_size=MAX_FRAME,
                                                  open_timeout=CONNECT_TIMEOUT, ping_interval=20, ping_timeout=60,
                                                  compression=None)
        except InvalidStatus as error:
            status = error.response.status_code
            body = error.response.body.decode(errors="replace").strip() if error.response.body else ""
            raise CorralError(status, _http_detail(body) or f"the controller refused the channel (HTTP {status})")\
                from None
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as error:
            raise CorralError(None, f"cannot open a channel at {url.split('?')[0]}: {error}") from None
        try:
            yield connection
        finally:
            await connection.close()

    def terminal(self, job_id: int, task: int = 0, *, watch: bool = False,
                 size: tuple[int, int] | None = None) -> contextlib.AbstractAsyncContextManager[ClientConnection]:
        rows, cols = size or (None, None)
        return self.channel(self.terminal_path(job_id, task), {"watch": watch, "rows": rows, "cols": cols})

    def exec(self, job_id: int, command: Sequence[str], task: int = 0, *, tty: bool = False, detach: bool = False,
             size: tuple[int, int] | None = None) -> contextlib.AbstractAsyncContextManager[ClientConnection]:
        if not command:
            raise ValueError("exec needs a command")
        rows, cols = size or (None, None)
        params = [("command", arg) for arg in command]
        params += [("tty", tty), ("detach", detach), ("rows", rows), ("cols", cols)]
        return self.channel(f"/api/v1/jobs/{job_id}/tasks/{task}/exec", params)

    def port(self, job_id: int, port: int, task: int = 0) -> contextlib.AbstractAsyncContextManager[ClientConnection]:
        return self.channel(f"/api/v1/jobs/{job_id}/tasks/{task}/ports/{port}")


def _http_detail(body: str) -> str:
    try:
        detail = json.loads(body).get("detail")
    except (ValueError, AttributeError):
        return body[:500]
    return str(detail) if detail else ""


def control(message: str) -> Role | Notice | Exit | Eof | None:
    """A worker's control message; None for one this client does not know (a newer worker may send more)."""
    try:
        return WorkerControl.validate_json(message)
    except ValidationError:
        return None


class Output(Protocol):
    def write(self, data: bytes, /) -> Any: ...

    def flush(self) -> Any: ...


@dataclass
class DetachWatch:
    """Finds DETACH_KEYS in typed bytes, across reads: a held first key goes out once the next key is not the
    second one (as docker attach does)."""

    keys: bytes = DETACH_KEYS
    held: bytes = b""

    def feed(self, data: bytes) -> tuple[bytes, bool]:
        """(bytes to send, whether the person detached)."""
        data = self.held + data
        self.held = b""
        found = data.find(self.keys)
        if found >= 0:
            return data[:found], True
        for size in range(len(self.keys) - 1, 0, -1):
            if data.endswith(self.keys[:size]):
                self.held = data[-size:]
                return data[:-size], False
        return data, False


@dataclass
class TerminalOutcome:
    """How a terminal or exec session ended: the process's exit (code None if unknown), or a detach."""

    code: int | None = None
    exited: bool = False
    detached: bool = False
    notes: list[str] = field(default_factory=list)


async def run_terminal(connection: ClientConnection, keys: AsyncIterator[bytes] | None, stdout: Output,
                       stderr: Output, *, resizes: AsyncIterator[tuple[int, int]] | None = None,
                       on_note: Callable[[str], None] | None = None, detach: bool = True) -> TerminalOutcome:
    """Pipe `keys` (stdin) to the channel and its output to `stdout`/`stderr` until the process exits, the
    channel closes or the person types DETACH_KEYS (when `detach`). Notices and a watcher's role go to
    `on_note`, one line each. Raises CorralError when the channel closed for a reason other than the end."""
    outcome = TerminalOutcome()
    note = on_note or outcome.notes.append
    senders = [asyncio.create_task(_send_keys(connection, keys, detach, outcome))] if keys is not None else []
    if resizes is not None:
        senders.append(asyncio.create_task(_send_resizes(connection, resizes)))
    try:
        async for message in connection:
            if isinstance(message, bytes):
                if message:
                    out = stderr if message[0] == STDERR else stdout
                    out.write(message[1:])
                    out.flush()
                continue
            match control(message):
                case Exit(code=code):
                    outcome.code, outcome.exited = code, True
                case Notice(text=text):
                    note(text)
                case Role(writer=False):
                    note("watching: another client holds the keyboard; your keys do not reach the terminal")
    except ConnectionClosed as closed:
        if not outcome.detached and (error := closed_error(closed)) is not None:
            raise error from None
    finally:
        for sender in senders:
            sender.cancel()
        await asyncio.gather(*senders, return_exceptions=True)
    if not outcome.detached and connection.close_code not in (None, CLOSE_NORMAL):
        raise close_error(connection.close_code, connection.close_reason)
    return outcome


async def _send_keys(connection: ClientConnection, keys: AsyncIterator[bytes], detach: bool,
                     outcome: TerminalOutcome) -> None:
    watch = DetachWatch()
    with contextlib.suppress(ConnectionClosed):
        async for data in keys:
            if detach:
                data, outcome.detached = watch.feed(data)
            if data:
                await connection.send(data)
            if outcome.detached:
                await connection.close(CLOSE_NORMAL, "detached")
                return
        await connection.send(Eof().model_dump_json())


async def _send_resizes(connection: ClientConnection, resizes: AsyncIterator[tuple[int, int]]) -> None:
    with contextlib.suppress(ConnectionClosed):
        async for rows, cols in resizes:
            await connection.send(Resize(rows=rows, cols=cols).model_dump_json())


@dataclass(frozen=True)
class ExecResult:
    """What `exec` returns: the exit code (None when the worker could not tell) and the output."""

    code: int | None
    stdout: bytes
    stderr: bytes


class OutputBuffer:
    """A stream `run_terminal` writes to, kept in memory."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data

    def flush(self) -> None:
        pass


async def capture_exec(connection: ClientConnection, stdin: bytes = b"") -> ExecResult:
    """Send `stdin` (then Eof), collect both streams until the process exits."""
    out, err = OutputBuffer(), OutputBuffer()

    async def feed() -> AsyncIterator[bytes]:
        for start in range(0, len(stdin), CHUNK):
            yield stdin[start:start + CHUNK]

    outcome = await run_terminal(connection, feed(), out, err, detach=False)
    return ExecResult(outcome.code, bytes(out.data), bytes(err.data))


class PortForwarder:
    """A local TCP server: each connection it accepts opens a port channel of its own to the task's port, and
    bytes flow both ways, half-closes included, until both sides are done."""

    def __init__(self, relay: Relay, job_id: int, remote_port: int, *, task: int = 0, address: str = "127.0.0.1",
                 local_port: int = 0, on_error: Callable[[CorralError], None] | None = None) -> None:
        self.relay, self.job_id, self.remote_port, self.task = relay, job_id, remote_port, task
        self.address, self.local_port, self.on_error = address, local_port, on_error
        self._server: asyncio.Server | None = None
        self.bound: tuple[str, int] = (address, local_port)
        self._connections: set[asyncio.Task] = set()

    async def start(self) -> tuple[str, int]:
        """Listen; returns the (address, port) bound, the port chosen by the system when asked for 0."""
        try:
            self._server = await asyncio.start_server(self._accepted, self.address, self.local_port,
                                                      limit=PORT_CHUNK)
        except OSError as error:
            raise CorralError(None, f"cannot listen on {self.address}:{self.local_port}: {error.strerror}") from None
        self.bound = self._server.sockets[0].getsockname()[:2]
        return self.bound

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for connection in list(self._connections):
            connection.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> PortForwarder:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        current = asyncio.current_task()
        assert current is not None
        self._connections.add(current)
        try:
            async with self.relay.port(self.job_id, self.remote_port, self.task) as channel:
                await pipe_port(channel, reader, writer)
        except CorralError as error:
            if self.on_error is not None:
                self.on_error(error)
        except asyncio.CancelledError:
            pass  # close() ends it: asyncio's server would log a cancelled connection task as an error
        finally:
            self._connections.discard(current)
            writer.close()
            with contextlib.suppress(OSError, ConnectionError):
                await writer.wait_closed()


async def pipe_port(channel: ClientConnection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Bytes both ways between a local connection and a port channel; Eof frames carry half-closes."""

    async def upstream() -> None:
        with contextlib.suppress(ConnectionClosed, ConnectionError):
            while data := await reader.read(PORT_CHUNK):
                await channel.send(data)
            await channel.send(Eof().model_dump_json())

    sending = asyncio.create_task(upstream())
    try:
        async for message in channel:
            if isinstance(message, bytes):
                writer.write(message)
                await writer.drain()
            elif isinstance(control(message), Eof) and writer.can_write_eof():
                writer.write_eof()
    except ConnectionClosed as closed:
        if (error := closed_error(closed)) is not None:
            raise error from None
    except ConnectionError:
        pass  # the local side went away: closing the channel tells the task
    finally:
        sending.cancel()
        await asyncio.gather(sending, return_exceptions=True)
    if channel.close_code not in (None, CLOSE_NORMAL):
        raise close_error(channel.close_code, channel.close_reason)


@contextlib.contextmanager
def forwarding_in_background(forwarder: PortForwarder) -> Iterator[tuple[str, int]]:
    """A forwarder served by an event loop of its own, in a thread, for sync code: yields its (address, port)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="corral-port-forward", daemon=True)
    thread.start()
    try:
        yield asyncio.run_coroutine_threadsafe(forwarder.start(), loop).result()
    finally:
        with contextlib.suppress(Exception):  # a forwarder that never started has nothing to close
            asyncio.run_coroutine_threadsafe(forwarder.close(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
