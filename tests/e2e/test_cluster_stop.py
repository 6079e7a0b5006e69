"""The harness's stop: a process that ignores SIGTERM is killed, not left running; the tests fail on it, the
benches say it and keep their figures."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.e2e.cluster import Cluster

DEAF = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('deaf', flush=True); time.sleep(60)"
OBEDIENT = "import time; print('up', flush=True); time.sleep(60)"


@pytest.fixture
def spawn():
    spawned = []

    def start(code: str) -> subprocess.Popen:
        process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
        spawned.append(process)
        process.stdout.readline()  # its handler is set
        return process

    yield start
    for process in spawned:  # whatever the harness left
        if process.poll() is None:
            process.kill()
        process.wait()
        process.stdout.close()


def a_cluster(tmp_path, spawn) -> Cluster:
    cluster = Cluster(tmp_path)
    cluster.workers["w1"] = spawn(OBEDIENT)
    cluster.controller = spawn(DEAF)
    return cluster


def test_a_process_deaf_to_sigterm_is_killed_and_fails_the_test(tmp_path, spawn):
    cluster = a_cluster(tmp_path, spawn)
    with pytest.raises(AssertionError, match="controller did not exit within 0.5 s of SIGTERM and was killed"):
        cluster.stop(deadline=0.5)
    assert cluster.controller.poll() is not None and cluster.workers["w1"].poll() is not None


def test_for_a_bench_it_is_said_and_returned(tmp_path, spawn, capsys):
    cluster = a_cluster(tmp_path, spawn)
    assert cluster.stop(strict=False, deadline=0.5) == ["controller"]
    assert "controller did not exit within 0.5 s of SIGTERM" in capsys.readouterr().err
    assert cluster.controller.poll() is not None


def test_processes_that_stop_are_not_reported(tmp_path, spawn):
    cluster = Cluster(tmp_path)
    cluster.workers["w1"] = spawn(OBEDIENT)
    cluster.controller = spawn(OBEDIENT)
    assert cluster.stop(deadline=5) == []
    assert cluster.stop() == []  # again: nothing left to stop
