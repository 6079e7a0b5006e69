"""A task's processes, started and waited for on the loop without asyncio's subprocess transport."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess

import pytest

from corral.core.protocol import StartOrder
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


@pytest.mark.parametrize("containment", CONTAINMENTS)
async def test_a_working_directory_gone_before_the_start_is_named_as_a_path(tmp_path, containment):
    """A start whose directory vanished after its build fails as a missing program does (127), and its reason names the
    directory as written, not as the repr of a Path object (PosixPath('...'))."""
    harness = Harness(tmp_path, containment=containment)
    await harness.act(build_order(["true"]))
    harness.attempt_dir().rmdir()
    await harness.act(StartOrder(task_id=1, attempt=0))
    report = await harness.ended()
    assert (report.state, report.exit_code) == ("FAILED", 127)
    assert report.reason == f"cannot start ['true']: [Errno 2] No such file or directory: '{harness.attempt_dir()}'"

