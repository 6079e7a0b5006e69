"""A daemon killed by a fatal signal says so in its log, with its threads' stacks, through the real processes: a
controller that died of SIGBUS (its store's mapping cut from under it) once ended with nothing in its log."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest

from tests.e2e.cluster import free_port
from tests.waiting import wait_for


@pytest.mark.parametrize("fault", [signal.SIGBUS, signal.SIGSEGV], ids=lambda fault: fault.name)
def test_the_controller_and_a_worker_killed_by_a_fault_say_so_in_their_logs(bare_cluster, fault):
    bare_cluster.start_worker("w1")
    for name, process in [("w1", bare_cluster.workers["w1"]), ("controller", bare_cluster.controller)]:
        os.kill(process.pid, fault)
        assert process.wait(timeout=30) == -fault
        log = (bare_cluster.root / f"{name}.log").read_text(errors="replace")  # whole: the stacks run long
        assert "Fatal Python error: " in log and "Current thread" in log, log


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_a_standalone_router_killed_by_a_fault_says_so_on_its_stderr(bare_cluster):
    port = free_port()
    router = subprocess.Popen([sys.executable, "-m", "corral", "router", "--controller", bare_cluster.url,
                               "--port", str(port)], stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "CORRAL_TOKEN": bare_cluster.admin_token})
    try:
        wait_for(lambda: _listening(port), 60, "the router to listen")
        os.kill(router.pid, signal.SIGBUS)
        _, said = router.communicate(timeout=30)
    finally:
        router.kill()
    assert router.returncode == -signal.SIGBUS
    assert "Fatal Python error: Bus error" in said, said
