"""The client's end of the relay against a fake controller+worker that plays core/relay.py's frames."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from urllib.parse import parse_qs, urlsplit

import pytest
from click.testing import CliRunner
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from corral.cli.main import main
from corral.client.errors import CorralError
from corral.client.http import Client
from corral.client.relay import (
    DetachWatch,
    OutputBuffer,
    PortForwarder,
    Relay,
    capture_exec,
    run_terminal,
    websocket_url,
)
from corral.core.relay import DETACH_KEYS, STDERR, STDOUT, Eof, Exit, Notice, Resize, Role
from tests.waiting import wait_until

TOKEN = "secret"
REFUSALS = {404: (4404, "job 404 not found"), 403: (4403, "job 7's token may not reach job 403"),
            409: (4409, "task 0 of job 409 is PENDING, not RUNNING"), 503: (4503, "")}


class FakeRelay:
    """Plays the controller and the worker: a terminal that echoes, an exec, and ports to local TCP servers."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, object]] = []  # (path, what arrived): resizes, closes
        self.url = ""

    async def handle(self, connection: ServerConnection) -> None:
        request = connection.request
        assert request is not None
        parts = urlsplit(request.path)
        query = parse_qs(parts.query)
        segments = parts.path.strip("/").split("/")  # api v1 jobs J tasks N KIND [PORT]
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            await connection.close(4401, "a valid admin or job token is required")
            return
        job = int(segments[3])
        if job in REFUSALS:
            await connection.close(*REFUSALS[job])
            return
        kind = segments[6]
        if kind == "terminal":
            await self.terminal(connection, query)
        elif kind == "exec":
            await self.exec(connection, query)
        else:
            await self.port(connection, int(segments[7]))

    async def terminal(self, connection: ServerConnection, query: dict) -> None:
        watch = query.get("watch") == ["1"]
        self.seen.append(("size", (query.get("rows"), query.get("cols"))))
        await connection.send(Role(writer=not watch).model_dump_json())
        await connection.send(bytes([STDOUT]) + b"$ ")
        try:
            async for message in connection:
                if isinstance(message, str):
                    control = json.loads(message)
                    self.seen.append((control["type"], control))
                    if control["type"] == "resize":
                        await connection.send(Notice(text=f"resized to {control['rows']}x{control['cols']}")
                                              .model_dump_json())
                    continue
                self.seen.append(("keys", message))
                if message.startswith(b"exit "):
                    await connection.send(Exit(code=int(message.split()[1])).model_dump_json())
                    await connection.close()
                    return
                await connection.send(bytes([STDOUT]) + message)
        except ConnectionClosed:
            pass
        self.seen.append(("closed", (connection.close_code, connection.close_reason)))

    async def exec(self, connection: ServerConnection, query: dict) -> None:
        command = query["command"]
        if command[0] == "fail":
            await connection.close(4500, f"cannot start {command[0]!r}: no such file or directory")
            return
        received = bytearray()
        async for message in connection:
            if isinstance(message, bytes):
                received += message
            elif json.loads(message)["type"] == "eof":
                break
        await connection.send(bytes([STDOUT]) + b" ".join(c.encode() for c in command) + b"|" + bytes(received))
        await connection.send(bytes([STDERR]) + b"warning")
        await connection.send(Exit(code=int(command[-1])).model_dump_json())
        await connection.close()

    async def port(self, connection: ServerConnection, port: int) -> None:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await connection.close(4500, f"nothing listens on port {port} in the task")
            return

        async def downstream() -> None:
            while data := await reader.read(65536):
                await connection.send(data)
            await connection.send(Eof().model_dump_json())

        sending = asyncio.create_task(downstream())
        async for message in connection:
            if isinstance(message, bytes):
                writer.write(message)
                await writer.drain()
            else:
                writer.write_eof()
        await sending
        writer.close()


@pytest.fixture
async def fake() -> AsyncIterator[FakeRelay]:
    relay = FakeRelay()
    async with serve(relay.handle, "127.0.0.1", 0) as server:
        relay.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        yield relay


async def keys(*chunks: bytes, then: asyncio.Event | None = None) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk
        await asyncio.sleep(0)  # one frame each, as typed
    if then is not None:
        await then.wait()


async def sizes(*values: tuple[int, int]) -> AsyncIterator[tuple[int, int]]:
    for value in values:
        yield value


def test_http_urls_become_websocket_urls():
    assert websocket_url("https://c.example/prefix/", "/api/v1/x", [("command", "a b"), ("tty", True),
                                                                     ("rows", None)]) == \
        "wss://c.example/prefix/api/v1/x?command=a+b&tty=1"
    assert websocket_url("http://h:1", "/p") == "ws://h:1/p"


async def test_terminal_output_and_exit_code(fake):
    out, err = OutputBuffer(), OutputBuffer()
    async with Relay(fake.url, TOKEN).terminal(1, size=(30, 100)) as channel:
        outcome = await run_terminal(channel, keys(b"echo hi\r", b"exit 3 "), out, err)
    assert (outcome.code, outcome.exited, outcome.detached) == (3, True, False)
    assert bytes(out.data) == b"$ echo hi\r" and not err.data
    assert ("size", (["30"], ["100"])) in fake.seen


async def test_detach_keys_close_the_channel_and_send_nothing_of_them(fake):
    async with Relay(fake.url, TOKEN).terminal(1) as channel:
        outcome = await run_terminal(channel, keys(b"ls\x10", DETACH_KEYS[1:] + b"never sent"), OutputBuffer(),
                                     OutputBuffer())
    assert outcome.detached and not outcome.exited
    await wait_until(lambda: ("closed", (1000, "detached")) in fake.seen)
    assert [what for kind, what in fake.seen if kind == "keys"] == [b"ls"]


def test_detach_watch_holds_a_split_sequence_and_lets_a_lone_ctrl_p_through():
    watch = DetachWatch()
    assert watch.feed(b"a\x10") == (b"a", False)
    assert watch.feed(b"b") == (b"\x10b", False)
    assert watch.feed(b"x\x10\x11y") == (b"x", True)
    assert DetachWatch().feed(b"\x10\x10\x11") == (b"\x10", True)


async def test_resizes_become_resize_frames_and_notices_go_to_their_own_lines(fake):
    notes: list[str] = []
    done = asyncio.Event()
    async with Relay(fake.url, TOKEN).terminal(1) as channel:
        session = asyncio.create_task(run_terminal(channel, keys(then=done), OutputBuffer(), OutputBuffer(),
                                                   resizes=sizes((40, 120)), on_note=notes.append))
        await wait_until(lambda: notes)
        await channel.send(b"exit 0 ")  # as the person would type it
        done.set()
        outcome = await asyncio.wait_for(session, 10)
    assert outcome.code == 0
    assert notes == ["resized to 40x120"]
    assert ("resize", Resize(rows=40, cols=120).model_dump()) in fake.seen


async def test_a_watcher_is_told_it_does_not_hold_the_keyboard(fake):
    notes: list[str] = []
    async with Relay(fake.url, TOKEN).terminal(1, watch=True) as channel:
        await run_terminal(channel, keys(b"exit 0 "), OutputBuffer(), OutputBuffer(), on_note=notes.append)
    assert notes and notes[0].startswith("watching:")


async def test_exec_captures_both_streams_and_the_code(fake):
    async with Relay(fake.url, TOKEN).exec(1, ["sh", "-c", "x", "7"]) as channel:
        result = await capture_exec(channel, b"input")
    assert (result.code, result.stdout, result.stderr) == (7, b"sh -c x 7|input", b"warning")


@pytest.mark.parametrize(("job", "message"), [
    (404, "job 404 not found"),
    (403, "job 7's token may not reach job 403"),
    (409, "task 0 of job 409 is PENDING, not RUNNING"),
    (503, "the task's worker did not answer in time"),
])
async def test_each_close_code_is_an_error_with_its_reason(fake, job, message):
    with pytest.raises(CorralError) as raised:
        async with Relay(fake.url, TOKEN).terminal(job) as channel:
            await run_terminal(channel, keys(), OutputBuffer(), OutputBuffer())
    assert str(raised.value) == message and raised.value.status == REFUSALS[job][0]


async def test_a_wrong_token_says_authentication_failed(fake):
    with pytest.raises(CorralError, match="^authentication failed: a valid admin or job token") as raised:
        async with Relay(fake.url, "wrong").exec(1, ["true", "0"]) as channel:
            await capture_exec(channel)
    assert raised.value.status == 4401


async def test_a_command_the_worker_cannot_start(fake):
    with pytest.raises(CorralError, match="cannot start 'fail'"):
        async with Relay(fake.url, TOKEN).exec(1, ["fail"]) as channel:
            await capture_exec(channel)


async def test_no_controller_is_a_clear_error():
    with pytest.raises(CorralError, match="cannot open a channel at ws://127.0.0.1:9/api/v1/jobs/1/tasks/0/terminal"):
        async with Relay("http://127.0.0.1:9", TOKEN).terminal(1):
            pass


async def echo_server() -> asyncio.Server:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    return await asyncio.start_server(echo, "127.0.0.1", 0)


async def test_port_forward_carries_50_concurrent_connections_with_half_closes(fake):
    server = await echo_server()
    remote = server.sockets[0].getsockname()[1]

    async def one(n: int, port: int) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"connection {n} ".encode() * 1000)
        writer.write_eof()
        data = await reader.read()  # to the end: the task's side half-closed after echoing all
        writer.close()
        return data

    async with server, PortForwarder(Relay(fake.url, TOKEN), 1, remote) as forwarder:
        results = await asyncio.wait_for(asyncio.gather(*(one(n, forwarder.bound[1]) for n in range(50))), 30)
    assert results == [f"connection {n} ".encode() * 1000 for n in range(50)]


async def test_a_refused_forwarded_connection_is_reported_and_closed(fake):
    errors: list[CorralError] = []
    async with PortForwarder(Relay(fake.url, TOKEN), 1, 1, on_error=errors.append) as forwarder:
        reader, writer = await asyncio.open_connection(*forwarder.bound)
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
    assert [str(e) for e in errors] == ["nothing listens on port 1 in the task"]


async def test_the_sync_client_execs_and_forwards(fake):
    server = await echo_server()
    remote = server.sockets[0].getsockname()[1]

    def use_it() -> tuple:
        import socket
        with Client(fake.url, TOKEN) as api:
            result = api.exec(1, ["echo", "0"])
            with api.port_forward(1, remote) as (host, port), socket.create_connection((host, port), 10) as sock:
                sock.sendall(b"ping")
                sock.shutdown(socket.SHUT_WR)
                echoed = sock.recv(100)
        return result, echoed

    async with server:
        result, echoed = await asyncio.to_thread(use_it)
    assert (result.code, result.stdout, echoed) == (0, b"echo 0|", b"ping")


@pytest.mark.parametrize("spec", ["x:y", "8888:", "0", "70000", "1:2:3", "-1"])
def test_bad_port_specs_are_usage_errors(spec):
    result = CliRunner().invoke(main, ["port-forward", "1", "--", spec], obj={"client": object()})
    assert result.exit_code == 2 and "[LOCAL:]REMOTE" in result.output and "Traceback" not in result.output


@pytest.fixture
def fake_in_thread():
    """The fake relay served by a loop of its own, for a CLI process to reach."""
    import threading
    relay = FakeRelay()
    started = threading.Event()
    stop: list[asyncio.Future] = []

    async def run() -> None:
        async with serve(relay.handle, "127.0.0.1", 0) as server:
            relay.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
            stop.append(asyncio.get_running_loop().create_future())
            started.set()
            await stop[0]

    thread = threading.Thread(target=asyncio.run, args=(run(),), daemon=True)
    thread.start()
    assert started.wait(10)
    yield relay
    stop[0].get_loop().call_soon_threadsafe(stop[0].set_result, None)
    thread.join(10)


def test_attach_on_a_real_pty_types_resizes_and_detaches_with_the_terminal_restored(fake_in_thread):
    import os
    import sys

    import pexpect
    env = {**os.environ, "CORRAL_URL": fake_in_thread.url, "CORRAL_TOKEN": TOKEN}
    child = pexpect.spawn(sys.executable, ["-m", "corral", "attach", "1"], env=env, dimensions=(30, 90),
                          timeout=20)
    child.expect_exact(b"$ ")
    child.send(b"hello")
    child.expect_exact(b"hello")
    child.setwinsize(44, 132)
    child.expect_exact(b"[corral] resized to 44x132")
    child.send(b"\x10\x11")
    child.expect_exact(b"corral attach 1")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert ("size", (["30"], ["90"])) in fake_in_thread.seen


def test_attach_exits_with_the_code_and_errors_in_one_line(fake_in_thread):
    import os
    import sys

    import pexpect
    env = {**os.environ, "CORRAL_URL": fake_in_thread.url, "CORRAL_TOKEN": TOKEN}
    child = pexpect.spawn(sys.executable, ["-m", "corral", "attach", "1"], env=env, timeout=20)
    child.expect_exact(b"$ ")
    child.send(b"exit 6 ")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 6
    refused = pexpect.spawn(sys.executable, ["-m", "corral", "attach", "409"], env=env, timeout=20)
    refused.expect(pexpect.EOF)
    refused.close()
    assert refused.exitstatus == 1
    assert refused.before.strip() == b"error: task 0 of job 409 is PENDING, not RUNNING"


async def test_a_command_too_long_for_a_request_line_is_refused_before_anything_is_sent(fake):
    with pytest.raises(CorralError, match="too long for a channel"):
        async with Relay(fake.url, TOKEN).exec(1, ["echo", "x" * 9000]):
            pass
    assert not fake.seen
