"""End to end: no process a task started outlives its worker's SIGKILL, whatever it did with sessions and forks."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

import psutil
import pytest

from corral.worker.processes import RECORD, Record
from tests.e2e.cluster import Cluster
from tests.waiting import wait_for
from tests.worker.support import CONTAINMENTS, daemonizing_task, written_pids

pytestmark = pytest.mark.e2e

SHIM = "corral.worker.shim"
WARDEN = "corral.worker.warden"


@pytest.fixture(params=CONTAINMENTS)
def containment(request) -> str:
    return request.param


def marked(marker: str) -> list[psutil.Process]:
    """The live processes with `marker` in their argv: every process of the attempt, its shim included."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        with contextlib.suppress(psutil.Error):
            if process.info["status"] != psutil.STATUS_ZOMBIE and any(marker in arg for arg in process.info["cmdline"]
                                                                      or []):
                found.append(process)
    return found


def alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill_marked(marker: str) -> None:
    for process in marked(marker):
        with contextlib.suppress(psutil.Error):
            process.kill()


def recorded(work_dir: Path) -> set[int]:
    """The pids in the process records of the work directory's attempts."""
    pids = set()
    for path in work_dir.glob(f"tasks/*/{RECORD}"):
        with contextlib.suppress(OSError, ValueError):
            pids |= {pid for pid, _ in Record.loads(path.read_text()).members}
    return pids


def registrations(cluster: Cluster) -> int:
    return cluster.log("w1").count("registered worker_id=")


def test_a_task_s_grandchild_dies_with_a_worker_killed_outright(bare_cluster, tmp_path, containment):
    marker = f"corral-e2e-grandchild-{os.getpid()}-{containment}"
    program = tmp_path / "prog.py"
    program.write_text("import time\ntime.sleep(300)\n")
    bare_cluster.start_worker("w1", 4, "--containment", containment)
    bare_cluster.submit(command=["sh", "-c", f"{sys.executable} {program} {marker}; echo done"])
    try:
        wait_for(lambda: any(p.info["cmdline"][:2] == [sys.executable, str(program)] for p in marked(marker)), 30,
                 "the task's python3 grandchild")
        bare_cluster.kill(bare_cluster.workers["w1"])
        wait_for(lambda: not marked(marker), 10, "every process of the attempt to die")
    finally:
        kill_marked(marker)


def test_a_double_forked_daemon_dies_with_a_worker_killed_outright(bare_cluster, tmp_path, containment):
    command, prefix = daemonizing_task(tmp_path, f"corral-e2e-daemon-{os.getpid()}-{containment}")
    bare_cluster.start_worker("w1", 4, "--containment", containment)
    bare_cluster.submit(command=command)
    try:
        main, daemon = wait_for(lambda: written_pids(prefix), 30, "the task and its daemon")
        assert psutil.Process(daemon).ppid() != main and os.getsid(daemon) != os.getsid(main)  # it escaped both
        bare_cluster.kill(bare_cluster.workers["w1"])
        wait_for(lambda: not marked(prefix.name), 10, "every process of the attempt to die")
    finally:
        kill_marked(prefix.name)


def test_a_restarted_worker_kills_what_its_predecessor_left_before_it_registers(bare_cluster, tmp_path,
                                                                                   containment):
    command, prefix = daemonizing_task(tmp_path, f"corral-e2e-leftover-{os.getpid()}-{containment}")
    bare_cluster.start_worker("w1", 4, "--containment", containment)
    bare_cluster.submit(command=command)
    try:
        _, daemon = wait_for(lambda: written_pids(prefix), 30, "the task and its daemon")
        if containment == "processes":  # a successor finds only what the shim recorded (it looks twice a second)
            wait_for(lambda: daemon in recorded(bare_cluster.root / "w1"), 10, "the shim to record the daemon")
        # The worker and its guards (the shims, or the worker's cgroup warden) die together (as in an OOM kill of
        # all of them), so no one cleans up: the guards are stopped first, else they would kill the task on seeing
        # the worker gone.
        guards = [p for p in marked(prefix.name) if SHIM in " ".join(p.info["cmdline"])] if containment == "processes" \
            else [p for p in marked(str(bare_cluster.root / "w1")) if WARDEN in " ".join(p.info["cmdline"])]
        assert guards
        for guard in guards:
            guard.send_signal(signal.SIGSTOP)
        bare_cluster.kill(bare_cluster.workers["w1"])
        for guard in guards:
            guard.kill()
        wait_for(lambda: not any(alive(guard) for guard in guards), 10, "the guards to be gone")
        left = marked(prefix.name)
        assert len(left) >= 3  # the shell, the program and its daemon run on, orphaned
        before = registrations(bare_cluster)
        bare_cluster.spawn_worker("w1", 4, "--containment", containment)
        wait_for(lambda: registrations(bare_cluster) > before, 30, "the new worker to register")
        assert not any(alive(p) for p in left), "leftovers still ran when the new worker registered"
        log = bare_cluster.log("w1")
        assert log.rindex("a previous worker on") < log.rindex("registered worker_id=")
    finally:
        kill_marked(prefix.name)
