"""Containment: reading /proc, matching recorded processes by start time, and a successor's sweep."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from corral.worker.containment import cgroup2_mount, cgroup_parent, leftovers, reap_leftovers, reap_record
from corral.worker.processes import ProcStat, Record, cgroup_pids, parse_stat, read_stat, remove_empty_cgroup
from tests.waiting import wait_for
from tests.worker.support import daemonizing_task, gone, written_pids

SHIM = (100, 5000)


def stat(pid: int, start: int, *, ppid: int = 1, sid: int | None = None) -> ProcStat:
    return ProcStat(pid=pid, ppid=ppid, pgid=sid or pid, sid=sid or pid, start=start)


def test_parse_stat_reads_past_a_command_name_with_spaces_and_parentheses():
    text = "4242 (my (odd) prog) S 17 4240 4239 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 1 0 46517 3133440 413 0 0"
    assert parse_stat(text) == ProcStat(pid=4242, ppid=17, pgid=4240, sid=4239, start=46517)
    assert parse_stat(text.replace(") S ", ") Z ")).zombie


def test_read_stat_of_this_process_and_of_none():
    own = read_stat(os.getpid())
    assert (own.pid, own.ppid, own.sid) == (os.getpid(), os.getppid(), os.getsid(0))
    assert read_stat(2**22 + 1) is None  # above any pid_max


def test_a_recorded_pid_counts_only_with_its_start_time():
    record = Record(shim=SHIM, members=[(200, 6000)])
    assert leftovers(record, [stat(200, 6000)]) == {200}
    assert leftovers(record, [stat(200, 9999), stat(100, 1234)]) == set()  # both pids recycled since


def test_a_live_recorded_member_vouches_for_its_session_and_descendants():
    record = Record(shim=SHIM, members=[(200, 6000)])
    processes = [
        stat(200, 6000, sid=200),
        stat(201, 7000, sid=200),  # forked after the last record, same session
        stat(300, 7100, sid=300, ppid=201),  # setsid'd child of one of ours
        stat(301, 7200, sid=300, ppid=300),
        stat(400, 7300, sid=400),  # someone else's
    ]
    assert leftovers(record, processes) == {200, 201, 300, 301}


def test_the_shim_s_own_session_is_not_swept_with_it():
    record = Record(shim=SHIM, members=[])
    assert leftovers(record, [stat(100, 5000, sid=50), stat(51, 5100, sid=50)]) == {100}


def test_a_record_survives_a_round_trip():
    record = Record(shim=SHIM, members=[(200, 6000), (201, 7000)])
    assert Record.loads(record.dumps()) == record


def test_cgroup2_mount_from_mountinfo():
    hybrid = ("35 28 0:30 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
              "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n")
    assert cgroup2_mount(hybrid) == Path("/sys/fs/cgroup/unified")
    assert cgroup2_mount("30 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n") \
        == Path("/sys/fs/cgroup")
    assert cgroup2_mount(hybrid.splitlines()[0]) is None


def test_a_successor_kills_what_a_dead_shim_recorded_and_nothing_else(tmp_path):
    command, prefix = daemonizing_task(tmp_path, "task")
    task = subprocess.Popen(command, start_new_session=True)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(100)"], start_new_session=True)
    try:
        main, daemon = wait_for(lambda: written_pids(prefix), 10, "the task and its daemon to start")
        attempt = tmp_path / "work" / "tasks" / "1-0"
        attempt.mkdir(parents=True)
        own = read_stat(os.getpid())
        # The shim saw the task's shell and its daemon (not the main program, which it missed); another record
        # names a pid that was since recycled.
        Record(shim=(os.getpid(), own.start + 1), members=[(task.pid, read_stat(task.pid).start),
                                                            (daemon, read_stat(daemon).start)]).write(
            attempt / "processes.json")
        other = tmp_path / "work" / "tasks" / "2-0"
        other.mkdir()
        Record(shim=(bystander.pid, read_stat(bystander.pid).start + 1), members=[]).write(other / "processes.json")
        assert reap_leftovers(tmp_path / "work") == 3
        task.wait(timeout=5)
        assert gone(main) and gone(daemon) and bystander.poll() is None
        assert not (attempt / "processes.json").exists()
        assert reap_record(attempt / "processes.json") == 0  # nothing left to do
    finally:
        for process in (task, bystander):
            process.kill()
            process.wait()


@pytest.mark.skipif(cgroup_parent() is None, reason="no writable cgroup v2 hierarchy on this machine")
def test_a_cgroup_is_removed_only_once_no_process_is_left_in_it():
    parent = cgroup_parent()
    assert parent is not None
    cgroup = parent / f"corral-test-{os.getpid()}-removal"
    cgroup.mkdir()
    process = subprocess.Popen(["/bin/sh", "-c", 'echo 0 > "$0/cgroup.procs" && exec sleep 30', str(cgroup)])
    try:
        wait_for(lambda: cgroup_pids(cgroup) == [process.pid], 10, "the process in its cgroup")
        assert not remove_empty_cgroup(cgroup)
        assert cgroup.is_dir()
    finally:
        process.kill()
        process.wait()
    wait_for(lambda: not cgroup_pids(cgroup), 10, "the cgroup emptied")
    assert remove_empty_cgroup(cgroup)
    assert not cgroup.exists()
    assert remove_empty_cgroup(cgroup)  # one gone already is gone
