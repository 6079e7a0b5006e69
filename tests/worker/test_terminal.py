"""Interactive attempts on a real PTY, attached through an in-memory relay: echo, resize, Ctrl-C and job control,
the exit code, replay on reattach, the writer and watchers, the idle timeout and the notice before a stop."""

from __future__ import annotations

import psutil
import pytest

from corral.core.log_limits import truncation_marker
from corral.core.protocol import PreemptOrder, StartOrder, StopOrder
from corral.core.relay import CLOSE_CONFLICT
from tests.waiting import wait_until
from tests.worker.fake_relay import FakeRelay
from tests.worker.support import CONTAINMENTS, Harness, build_order

SHELL = ["bash", "--norc", "--noprofile", "-i"]


@pytest.fixture(params=CONTAINMENTS)
def containment(request):
    return request.param


@pytest.fixture
def relay():
    return FakeRelay()


@pytest.fixture
def harness(tmp_path, relay, containment):
    return Harness(tmp_path, containment=containment, dial=relay.dial)


async def start(harness: Harness, command: list[str], **fields) -> None:
    await harness.act(build_order(command, interactive=True, **fields))
    await harness.act(StartOrder(task_id=1, attempt=0))
    assert harness.states()[-1] == "RUNNING"


async def test_keys_reach_the_shell_and_its_exit_code_comes_back(harness, relay):
    await start(harness, SHELL)
    client = await relay.open(harness.runner, "terminal")
    assert (await client.control("role"))["writer"] is True
    await client.type(b"echo hello-$((40+2))\n")
    await client.output(b"hello-42")
    await client.type(b"exit 3\n")
    assert (await client.control("exit"))["code"] == 3
    assert await client.end() == (1000, "")
    report = await harness.ended()
    assert (report.state, report.exit_code) == ("FAILED", 3)
    assert b"hello-42" in (harness.attempt_dir() / "stdout").read_bytes()


async def test_the_task_has_a_controlling_terminal_with_job_control_and_a_window_size(harness, relay):
    await start(harness, SHELL)
    client = await relay.open(harness.runner, "terminal", rows=30, cols=100)
    await client.type(b"case $- in *m*) echo JC-$((1+1));; esac; stty size\n")
    await client.output(b"JC-2")
    await client.output(b"30 100")
    await client.resize(41, 123)
    await client.type(b"stty size\n")
    await client.output(b"41 123")


async def test_ctrl_c_interrupts_a_sleep_and_the_shell_lives_on(harness, relay):
    await start(harness, SHELL)
    client = await relay.open(harness.runner, "terminal")
    await client.type(b"sleep 30\n")
    await wait_until(lambda: sleeping(harness, "30"), 5, "sleep 30 to run")
    await client.type(b"\x03")
    await wait_until(lambda: not sleeping(harness, "30"), 5, "Ctrl-C to end the sleep")
    await client.type(b"echo alive-$((3*3))\n")
    await client.output(b"alive-9")
    assert harness.states()[-1] == "RUNNING"


def sleeping(harness: Harness, seconds: str) -> bool:
    """Whether a `sleep SECONDS` of the attempt runs."""
    place = harness.runner._attempts[(1, 0)]
    return any(process.cmdline() == ["sleep", seconds] for process in _processes(place))


def _processes(att) -> list[psutil.Process]:
    found = []
    for pid in psutil.pids():
        try:
            process = psutil.Process(pid)
            if att.process.pid in {parent.pid for parent in process.parents()} or pid == att.process.pid:
                found.append(process)
        except psutil.Error:
            continue
    return found


async def test_who_attaches_again_sees_the_latest_output(harness, relay):
    await start(harness, SHELL)
    first = await relay.open(harness.runner, "terminal")
    await first.type(b"echo mark-$((5*5))\n")
    await first.output(b"mark-25")
    await first.leave()
    again = await relay.open(harness.runner, "terminal")
    await again.output(b"mark-25")
    assert (await again.control("role"))["writer"] is True  # the only one left holds the keyboard


async def test_one_writer_the_others_watch_and_the_keyboard_passes_on(harness, relay):
    await start(harness, SHELL)
    writer = await relay.open(harness.runner, "terminal")
    second = await relay.open(harness.runner, "terminal")
    watcher = await relay.open(harness.runner, "terminal", watch=True)
    assert [(await c.control("role"))["writer"] for c in (writer, second, watcher)] == [True, False, False]
    await second.type(b"echo from-b-$((1+1))\n")  # not the writer: dropped
    await writer.type(b"echo from-a-$((2+2))\n")
    await watcher.output(b"from-a-4")
    assert b"from-b" not in watcher.out
    await writer.leave()
    await wait_until(lambda: [c["writer"] for c in second.controls if c["type"] == "role"] == [False, True], 5,
                     "the keyboard to pass to the next non-watcher")
    await second.type(b"echo from-b-$((3+3))\n")
    await watcher.output(b"from-b-6")
    assert [c["writer"] for c in watcher.controls if c["type"] == "role"] == [False]


async def test_an_unattended_attempt_ends_killed_at_its_idle_timeout(harness, relay):
    await start(harness, ["sleep", "60"], idle_timeout=0.5, grace_period=1)
    client = await relay.open(harness.runner, "terminal", watch=True)
    await client.control("role")
    await wait_until(lambda: harness.runner._attempts[(1, 0)].idle_since + 0.8 < __import__("time").monotonic(),
                     5, "the idle timeout to pass while attached")
    assert harness.states()[-1] == "RUNNING"  # a watcher counts as attached
    await client.leave()
    report = await harness.ended(timeout=5)
    assert (report.state, report.reason) == ("KILLED", "idle timeout: no client attached for 0.5s")


async def test_attached_clients_read_a_notice_before_a_preemption_signals(harness, relay):
    await start(harness, SHELL)
    client = await relay.open(harness.runner, "terminal")
    await client.control("role")
    await harness.act(PreemptOrder(task_id=1, attempt=0, epoch=2, grace_period=1))
    kinds = [c["type"] for c in client.controls]
    assert kinds.index("notice") < kinds.index("exit")
    assert client.controls[kinds.index("notice")]["text"] == (
        "corral: job 1 is being preempted (epoch 2): its processes get SIGTERM now and SIGKILL in 1 s")
    assert harness.last().state == "PREEMPTED"


async def test_a_terminal_of_a_batch_task_or_an_ended_one_is_refused(harness, relay):
    await harness.act(build_order(["sleep", "60"]))
    await harness.act(StartOrder(task_id=1, attempt=0))
    client = await relay.open(harness.runner, "terminal")
    code, reason = await client.end()
    assert (code, reason) == (CLOSE_CONFLICT, "the task is not interactive: it has no terminal (use exec)")
    await harness.act(StopOrder(task_id=1, attempt=0, reason="done", grace_period=1))
    late = await relay.open(harness.runner, "terminal")
    assert await late.end() == (CLOSE_CONFLICT, "the task's attempt 0 is not running any more on its worker")


async def test_a_frame_that_is_no_control_message_closes_the_channel(harness, relay):
    await start(harness, SHELL)
    client = await relay.open(harness.runner, "terminal")
    await client.ws.send('{"type": "resize", "rows": 0, "cols": 80}')
    assert (await client.end())[0] == 1007
    assert harness.states()[-1] == "RUNNING"


async def test_the_terminals_log_is_capped_as_a_batch_tasks_output(harness, relay):
    harness.runner.log_limit = 1000
    await start(harness, ["sh", "-c", "head -c 20000 /dev/zero | tr '\\0' x; echo; echo end-$((1+1))"])
    await harness.ended()
    log = (harness.attempt_dir() / "stdout").read_bytes()
    assert log == b"x" * 1000 + truncation_marker(1000)
