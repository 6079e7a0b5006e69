"""A task's processes, started and waited for on the loop without asyncio's subprocess transport."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys

import pytest

from corral.core.protocol import StartOrder
from corral.worker import spawning
from corral.worker.spawning import spawn
from tests.worker.support import CONTAINMENTS, Harness, build_order


async def test_a_child_reports_its_end_as_asyncio_does_and_is_not_signalled_once_reaped(tmp_path):
    child = spawn(["sleep", "30"], tmp_path, dict(os.environ), subprocess.DEVNULL, subprocess.DEVNULL,
                  subprocess.DEVNULL)
    assert child.returncode is None and os.getpgid(child.pid) == child.pid  # a session, so a group, of its own
    child.send_signal(signal.SIGTERM)
    assert await child.wait() == -signal.SIGTERM and child.returncode == -signal.SIGTERM
    with pytest.raises(ProcessLookupError):
        child.kill()


@pytest.mark.parametrize("containment", CONTAINMENTS)
async def test_a_task_runs_without_an_asyncio_subprocess_transport(tmp_path, containment, monkeypatch):
    """Its objects and callbacks cost each start more than the pidfd the worker waits on."""
    loop = asyncio.get_running_loop()
    monkeypatch.setattr(loop, "subprocess_exec", lambda *args, **kwargs: pytest.fail("made a transport"))
    harness = Harness(tmp_path, containment=containment)
    await harness.act(build_order(["sh", "-c", "exit 3"]))
    await harness.act(StartOrder(task_id=1, attempt=0))
    report = await harness.ended()
    assert (report.state, report.exit_code) == ("FAILED", 3)


# What a started program finds: its directory, its descriptors and where stdin goes, whether it leads a session, its
# environment; and (a program that changes none) the signals it has blocked, ignored and caught.
PROBES = [[sys.executable, "-I", "-S", "-c",
           "import json, os\n"
           "print(json.dumps([os.getcwd(), sorted(os.listdir('/proc/self/fd')), os.readlink('/proc/self/fd/0'),\n"
           "                  os.getsid(0) == os.getpid(), dict(os.environ)]))"],
          ["/bin/grep", "^Sig", "/proc/self/status"]]


async def started(argv: list[str], cwd, env: dict[str, str]) -> tuple[int, bytes]:
    """Start `argv` as the runner does (stdin /dev/null, stdout and stderr pipes); its exit code and its output."""
    (out_read, out_write), (err_read, err_write) = os.pipe(), os.pipe()
    try:
        child = spawn(argv, cwd, env, subprocess.DEVNULL, out_write, err_write)
    finally:
        os.close(out_write)
        os.close(err_write)
    code = await child.wait()
    with open(out_read, "rb") as out, open(err_read, "rb") as err:
        return code, out.read() + err.read()


def test_this_c_library_starts_programs_with_posix_spawn():
    """glibc 2.34 or later (the development machines' and CI's): the starts below compare both ways."""
    assert spawning._SPAWN is not None


@pytest.mark.parametrize("probe", PROBES, ids=["python", "signals"])
async def test_a_program_started_by_posix_spawn_finds_what_popen_gives_it(tmp_path, monkeypatch, probe):
    """The same directory, descriptors (an inheritable one of the worker's closed), session, environment, blocked
    and ignored signals as Popen(cwd=, close_fds=True, start_new_session=True) gives."""
    leaked = os.open(os.devnull, os.O_RDONLY)
    os.set_inheritable(leaked, True)
    env = {"PATH": os.defpath, "CORRAL_TASK_INDEX": "7", "EMPTY": "", "ÜNÏCODE": "välue \udcff", "LANG": "C.UTF-8"}
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
        spawned = await started(probe, tmp_path, env)
        monkeypatch.setattr(spawning, "_SPAWN", None)
        popened = await started(probe, tmp_path, env)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR2})
        os.close(leaked)
    assert spawned == popened
    code, output = popened
    if probe[0] == sys.executable:
        assert json.loads(output)[:4] == [str(tmp_path), ["0", "1", "2", "3"], os.devnull, True]
    else:
        status = dict(line.split(":\t") for line in output.decode().splitlines())
        defaults = {signal.SIGPIPE, signal.SIGXFSZ, *range(32, signal.SIGRTMIN)}  # glibc's own below SIGRTMIN
        assert int(status["SigBlk"], 16) == 1 << (signal.SIGUSR2 - 1)
        assert not any(int(status["SigIgn"], 16) & 1 << (sig - 1) for sig in defaults)


@pytest.mark.parametrize("case", ["no directory", "a file for a directory", "no program", "a program not executable",
                                  "a name with =", "a NUL in an argument"])
async def test_a_start_that_cannot_be_made_raises_as_popen_does(tmp_path, monkeypatch, case):
    (tmp_path / "file").write_text("")
    argv, cwd, env = ["/bin/true"], tmp_path, {"PATH": os.defpath}
    if case == "no directory":
        cwd = tmp_path / "gone"
    elif case == "a file for a directory":
        cwd = tmp_path / "file"
    elif case == "no program":
        argv = [str(tmp_path / "missing")]
    elif case == "a program not executable":
        argv = [str(tmp_path / "file")]
    elif case == "a name with =":
        env["A=B"] = "c"
    else:
        argv = ["/bin/true", "a\0b"]
    errors = []
    for way in (spawning._SPAWN, None):
        monkeypatch.setattr(spawning, "_SPAWN", way)
        with pytest.raises((OSError, ValueError)) as raised:
            spawn(argv, cwd, env, subprocess.DEVNULL, subprocess.DEVNULL, subprocess.DEVNULL)
        errors.append((type(raised.value), str(raised.value)))
    assert errors[0] == errors[1]
