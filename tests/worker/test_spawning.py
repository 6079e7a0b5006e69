"""Starting a process inside an attempt's cgroup without a shell, and waiting for it on the loop."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

from corral.worker.containment import cgroup_parent
from corral.worker.spawning import spawn

HOME = cgroup_parent()
needs_cgroups = pytest.mark.skipif(HOME is None, reason="no writable cgroup v2 hierarchy on this machine")


def own_cgroup() -> str:
    return Path("/proc/self/cgroup").read_text()


@pytest.fixture
def cgroup():
    assert HOME is not None
    path = HOME / f"corral-test-spawning-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    yield path
    path.rmdir()


@needs_cgroups
async def test_a_process_started_in_a_cgroup_is_in_it_from_its_exec_and_the_worker_goes_back_home(cgroup, tmp_path):
    before = own_cgroup()
    out = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT)
    try:
        child = spawn(["cat", "/proc/self/cgroup"], tmp_path, dict(os.environ), subprocess.DEVNULL, out, out,
                      cgroup=(cgroup, HOME))
    finally:
        os.close(out)
    assert own_cgroup() == before
    assert await child.wait() == 0 and child.returncode == 0
    assert f"/{cgroup.name}\n" in (tmp_path / "out").read_text()


@needs_cgroups
async def test_a_start_that_fails_leaves_the_worker_in_its_own_cgroup(cgroup, tmp_path):
    before = own_cgroup()
    with pytest.raises(FileNotFoundError):
        spawn([str(tmp_path / "absent")], tmp_path, {}, subprocess.DEVNULL, subprocess.DEVNULL, subprocess.DEVNULL,
              cgroup=(cgroup, HOME))
    assert own_cgroup() == before
    assert (cgroup / "cgroup.procs").read_text() == ""


async def test_a_child_reports_its_end_as_asyncio_does_and_is_not_signalled_once_reaped(tmp_path):
    child = spawn(["sleep", "30"], tmp_path, dict(os.environ), subprocess.DEVNULL, subprocess.DEVNULL,
                  subprocess.DEVNULL)
    assert child.returncode is None and os.getpgid(child.pid) == child.pid  # a session, so a group, of its own
    child.send_signal(signal.SIGTERM)
    assert await child.wait() == -signal.SIGTERM and child.returncode == -signal.SIGTERM
    with pytest.raises(ProcessLookupError):
        child.kill()
