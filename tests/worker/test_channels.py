"""exec and port channels into a running attempt, through an in-memory relay, on real processes."""

from __future__ import annotations

import asyncio
import os
import sys

import psutil
import pytest

from corral.core.protocol import RelayOrder, StartOrder, StopOrder
from corral.core.relay import CLOSE_CONFLICT, CLOSE_WORKER_ERROR, STDERR
from corral.worker.channels import relay_url
from corral.worker.runner import _Place, free_port
from tests.waiting import wait_until
from tests.worker.fake_relay import FakeRelay
from tests.worker.support import CONTAINMENTS, Harness, build_order

# A task serving HTTP on a port of its own choosing, which it writes to ./port once it listens.
SERVER = """
import http.server, os
server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
open("port.partial", "w").write(str(server.server_port)); os.rename("port.partial", "port")
server.serve_forever()
"""


@pytest.fixture(params=CONTAINMENTS)
def harness(tmp_path, request):
    relay = FakeRelay()
    harness = Harness(tmp_path, containment=request.param, dial=relay.dial)
    harness.relay = relay
    return harness


async def running(harness: Harness, command: list[str], **fields) -> None:
    await harness.act(build_order(command, **fields))
    await harness.act(StartOrder(task_id=1, attempt=0))
    assert harness.states()[-1] == "RUNNING"


async def test_exec_runs_in_the_tasks_directory_and_environment_with_its_streams_apart(harness):
    await running(harness, ["sleep", "60"], env={"FAVOURITE": "plum"})
    client = await harness.relay.open(harness.runner, "exec",
                                      command=["sh", "-c", "echo out $FAVOURITE; pwd; echo err >&2; exit 4"])
    assert (await client.control("exit"))["code"] == 4
    assert await client.end() == (1000, "")
    assert client.out == f"out plum\n{harness.attempt_dir()}\n".encode()
    assert client.streams[STDERR] == b"err\n"
    assert harness.states()[-1] == "RUNNING"  # the task itself goes on


async def test_execs_that_ended_are_let_go_with_their_lifelines(harness):
    """A notebook session may exec hundreds of times: an ended exec's process and shim lifeline are not kept."""
    await running(harness, ["sleep", "60"])
    for _ in range(3):
        client = await harness.relay.open(harness.runner, "exec", command=["true"])
        assert (await client.control("exit"))["code"] == 0
        await client.end()
    attempt = next(iter(harness.runner._attempts.values()))
    before = len(os.listdir("/proc/self/fd"))
    client = await harness.relay.open(harness.runner, "exec", command=["true"])
    assert (await client.control("exit"))["code"] == 0
    assert len(attempt.execs) == 1  # the three before it are gone
    # Its own streams' pipes close as their ends are read, which may come after its exit is known; the three
    # before it held theirs for good if they were kept: only its lifeline is left once its streams are done
    await wait_until(lambda: len(os.listdir("/proc/self/fd")) <= before + 1, what="the ended execs' descriptors")


async def test_exec_reads_its_stdin_until_eof(harness):
    await running(harness, ["sleep", "60"])
    client = await harness.relay.open(harness.runner, "exec", command=["cat"])
    await client.type(b"line one\n")
    await client.output(b"line one\n")
    await client.eof()
    assert (await client.control("exit"))["code"] == 0


async def test_exec_on_a_terminal_of_its_own(harness):
    await running(harness, ["sleep", "60"])
    client = await harness.relay.open(harness.runner, "exec", tty=True, rows=20, cols=70,
                                      command=["sh", "-c", "tty; stty size; read answer; echo got-$answer; exit 5"])
    await client.output(b"20 70")
    await client.type(b"yes\n")
    assert (await client.control("exit"))["code"] == 5
    assert b"/dev/pts/" in client.out and b"got-yes" in client.out


async def test_a_detached_exec_is_started_and_its_output_joins_the_tasks_logs(harness):
    await running(harness, ["sleep", "60"])
    client = await harness.relay.open(harness.runner, "exec", detach=True,
                                      command=["sh", "-c", "echo detached-out; echo detached-err >&2"])
    exit_ = await client.control("exit")
    assert exit_["code"] is None and exit_["reason"].startswith("started, pid ")
    assert await client.end() == (1000, "")
    for stream in ("stdout", "stderr"):
        path = harness.attempt_dir() / stream  # created with the first byte written to it
        await wait_until(lambda s=stream, p=path: p.exists() and f"detached-{s[3:]}\n" in p.read_text(), 5,
                         f"the detached output in {stream}")


async def test_an_exec_whose_client_goes_away_is_hung_up(harness):
    await running(harness, ["sleep", "60"])
    client = await harness.relay.open(harness.runner, "exec", command=["sleep", "77.25"])
    await wait_until(lambda: sleeps("77.25"), 5, "the exec to run")
    await client.leave()
    await wait_until(lambda: not sleeps("77.25"), 5, "SIGHUP to end the exec")
    assert harness.states()[-1] == "RUNNING"


@pytest.mark.parametrize("slow_start", [False, True])
async def test_execs_end_with_their_attempt(harness, monkeypatch, slow_start):
    if slow_start:  # the stop comes after the exec's process started but before its launch returned
        launch = _Place.launch

        async def slow_launch(place, *args, **kwargs):
            process = await launch(place, *args, **kwargs)
            await asyncio.sleep(1)
            return process

        monkeypatch.setattr(_Place, "launch", slow_launch)
    await running(harness, ["sleep", "60"], grace_period=1)
    client = await harness.relay.open(harness.runner, "exec", command=["sh", "-c", "trap '' TERM HUP; sleep 78.25"])
    await wait_until(lambda: sleeps("78.25"), 5, "the exec to run")
    await harness.act(StopOrder(task_id=1, attempt=0, reason="enough", grace_period=1))
    assert client.controls[0]["text"] == ("corral: job 1 is being stopped (enough): its processes get SIGTERM now "
                                          "and SIGKILL in 1 s")
    await wait_until(lambda: not sleeps("78.25"), 5, "the exec to be killed with its attempt")
    await client.end()


async def test_an_exec_that_cannot_start_says_why(harness):
    await running(harness, ["sleep", "60"])
    client = await harness.relay.open(harness.runner, "exec", command=["no-such-program-here"])
    code, reason = await client.end()
    assert code == CLOSE_WORKER_ERROR and reason.startswith("cannot start no-such-program-here: ")


async def test_a_port_channel_reaches_a_server_of_the_task(harness):
    await running(harness, [sys.executable, "-c", SERVER])
    port_file = harness.attempt_dir() / "port"
    port = int(await wait_until(lambda: port_file.exists() and port_file.read_text(), 10, "the server to listen"))
    client = await harness.relay.open(harness.runner, "port", port=port)
    await client.type(b"GET /port HTTP/1.0\r\n\r\n")
    await client.eof()
    await wait_until(lambda: client.controls, 5, "the server's half-close")
    assert client.controls == [{"type": "eof"}]
    assert client.raw.startswith(b"HTTP/1.0 200 OK") and client.raw.endswith(str(port).encode())
    assert await client.end() == (1000, "")


async def test_a_port_the_task_does_not_listen_on_is_refused_naming_those_it_does(harness):
    await running(harness, [sys.executable, "-c", SERVER])
    port_file = harness.attempt_dir() / "port"
    port = int(await wait_until(lambda: port_file.exists() and port_file.read_text(), 10, "the server to listen"))
    other = free_port()
    client = await harness.relay.open(harness.runner, "port", port=other)
    assert await client.end() == (CLOSE_CONFLICT, f"no process of this task listens on port {other} "
                                                  f"(it listens on: {port})")


def test_the_relay_of_a_session_is_a_websocket_on_the_controllers_address():
    assert relay_url("https://ctl.example:8443/corral/", "abcdefghijklmnop", "w-1") == \
        "wss://ctl.example:8443/corral/api/v1/relay/abcdefghijklmnop?worker=w-1"
    assert relay_url("http://10.0.0.1:8080", "abcdefghijklmnop", "w-2") == \
        "ws://10.0.0.1:8080/api/v1/relay/abcdefghijklmnop?worker=w-2"


def sleeps(seconds: str) -> bool:
    """Whether a `sleep SECONDS` runs on this machine."""
    return any(process.info["cmdline"] == ["sleep", seconds] for process in psutil.process_iter(["cmdline"]))


async def test_an_exec_output_larger_than_any_buffer_arrives_whole(harness):
    await running(harness, ["sleep", "60"])
    client = await harness.relay.open(harness.runner, "exec", command=["head", "-c", "5000000", "/dev/zero"])
    assert (await client.control("exit", timeout=20))["code"] == 0
    assert client.out == bytes(5_000_000)


async def test_a_relay_that_cannot_be_dialed_is_dialed_again_when_its_order_repeats(harness):
    await running(harness, ["sleep", "60"])
    calls = []
    real = harness.runner._dial

    def flaky(order):
        calls.append(order.session)
        if len(calls) == 1:
            raise OSError("controller unreachable")
        return real(order)

    harness.runner._dial = flaky
    with pytest.raises(TimeoutError):
        await harness.relay.open(harness.runner, "exec", command=["echo", "second-try"], timeout=0.5)
    order = RelayOrder(session=calls[0], task_id=1, attempt=0, kind="exec", command=["echo", "second-try"])
    harness.relay.expect(order.session)
    assert harness.runner.submit(order) is not None
    client = await harness.relay.client(order.session)
    assert (await client.control("exit"))["code"] == 0 and client.out == b"second-try\n"


async def test_an_exec_without_a_command_is_refused(harness):
    await running(harness, ["sleep", "60"])
    client = await harness.relay.open(harness.runner, "exec", command=[])
    assert await client.end() == (CLOSE_WORKER_ERROR, "exec needs a command")


async def test_a_port_channel_refuses_what_is_not_its_protocol_and_a_task_listening_on_nothing(harness):
    await running(harness, [sys.executable, "-c", SERVER])
    port_file = harness.attempt_dir() / "port"
    port = int(await wait_until(lambda: port_file.exists() and port_file.read_text(), 10, "the server to listen"))
    client = await harness.relay.open(harness.runner, "port", port=port)
    await client.ws.send('{"type": "resize", "rows": 3, "cols": 3}')
    assert await client.end() == (1007, "not a control message of a port channel: eof")
    await harness.act(build_order(["sleep", "60"], task_id=2))
    await harness.act(StartOrder(task_id=2, attempt=0))
    quiet = await harness.relay.open(harness.runner, "port", task_id=2, port=port)
    assert await quiet.end() == (CLOSE_CONFLICT,
                                 f"no process of this task listens on port {port} (it listens on: none)")
