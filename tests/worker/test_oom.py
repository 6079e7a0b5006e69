"""OOM kills: read from a memory cgroup's records, judged, and reported by the runner."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.core.protocol import StartOrder
from corral.worker.oom import CgroupMemory, MemoryRecord, cgroup_dirs, killed_for_memory, parse_counter, parse_limit
from corral.worker.runner import Runner
from tests.worker.support import Harness, build_order

ROOT = Path("/sys/fs/cgroup")


def test_cgroup_dirs_of_v1_and_v2():
    v1 = "4:memory:/process_api/abc\n3:cpuset:/\n0::/\n"
    assert cgroup_dirs(v1, ROOT) == (ROOT, ROOT / "memory/process_api/abc")
    assert cgroup_dirs("0::/user.slice/session-1.scope\n", ROOT) == (ROOT / "user.slice/session-1.scope", None)
    assert cgroup_dirs("5:cpu,memory:/x\n", ROOT) == (None, ROOT / "memory/x")


def test_parsing_counters_and_limits():
    assert parse_counter("low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n", "oom_kill") == 2
    assert parse_counter("oom_kill_disable 0\nunder_oom 0\noom_kill 5\n", "oom_kill") == 5
    assert parse_counter("oom_kill_disable 0\n", "oom_kill") is None
    assert parse_limit("max\n") is None and parse_limit("9223372036854771712\n") is None
    assert parse_limit("1073741824\n") == 2**30


@pytest.mark.parametrize(("exit_code", "before", "after", "oom"), [
    (137, MemoryRecord(oom_kills=0), MemoryRecord(oom_kills=1), True),
    (137, MemoryRecord(oom_kills=1), MemoryRecord(oom_kills=1), False),  # a SIGKILL from someone else
    (1, MemoryRecord(oom_kills=0), MemoryRecord(oom_kills=1), False),  # another task's kill; this one exited 1
    (137, MemoryRecord(peak=10), MemoryRecord(peak=99, limit=100), True),  # no counter: the peak hit the limit
    (137, MemoryRecord(peak=99), MemoryRecord(peak=99, limit=100), False),  # ...but not during this attempt
    (137, MemoryRecord(peak=10), MemoryRecord(peak=50, limit=100), False),
    (137, MemoryRecord(), MemoryRecord(), False),  # no cgroup to ask
])
def test_the_verdict(exit_code, before, after, oom):
    assert killed_for_memory(exit_code, before, after) is oom


def test_a_missing_cgroup_reads_as_no_record(tmp_path):
    assert CgroupMemory(tmp_path / "v2", tmp_path / "v1").read() == MemoryRecord()


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_the_peak_and_limit_are_read_only_where_the_kernel_keeps_no_counter(tmp_path, version):
    events, peak, limit = (("memory.events", "memory.peak", "memory.max") if version == "v2" else
                           ("memory.oom_control", "memory.max_usage_in_bytes", "memory.limit_in_bytes"))
    (tmp_path / events).write_text("oom 3\noom_kill 2\n")
    (tmp_path / peak).write_text("99\n")
    (tmp_path / limit).write_text("100\n")
    memory = CgroupMemory(**{f"{version}_dir": tmp_path})
    assert memory.read() == MemoryRecord(oom_kills=2)
    (tmp_path / events).write_text("oom 3\n")
    assert memory.read() == MemoryRecord(peak=99, limit=100)


def test_the_counter_s_file_is_opened_once_and_read_afresh_each_time(tmp_path):
    events = tmp_path / "memory.events"
    events.write_text("oom_kill 2\n")
    memory = CgroupMemory(v2_dir=tmp_path)
    assert memory.read() == MemoryRecord(oom_kills=2)
    events.write_text("oom_kill 3\n")  # in place, as the kernel keeps it
    assert memory.read() == MemoryRecord(oom_kills=3)
    events.unlink()  # opened again, it would be missing
    assert memory.read() == MemoryRecord(oom_kills=3)


async def test_a_task_killed_while_its_cgroup_counts_an_oom_kill_is_reported_as_oom(tmp_path):
    """The task bumps the (fake) v1 counter, then dies by SIGKILL, as the kernel's OOM killer would leave it."""
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    control = cgroup / "memory.oom_control"
    control.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 4\n")
    harness = Harness(tmp_path / "work")
    harness.runner = Runner(harness.work_dir, report=harness.reports.append, fetch_bundle=harness._fetch,
                            flush_logs=harness._flush, watch_logs=lambda *_: None,
                            memory=CgroupMemory(v1_dir=cgroup))
    script = f"printf 'oom_kill_disable 0\\nunder_oom 0\\noom_kill 5\\n' > {control}; kill -9 $$"
    await harness.act(build_order(["sh", "-c", script]))
    await harness.act(StartOrder(task_id=1, attempt=0))
    report = await harness.ended()
    assert (report.state, report.exit_code, report.oom_killed) == ("FAILED", 137, True)
    assert report.reason.startswith("out of memory: killed by signal SIGKILL")

    await harness.act(build_order(["sh", "-c", "kill -9 $$"], attempt=1))
    await harness.act(StartOrder(task_id=1, attempt=1))
    other = await harness.ended(attempt=1)
    assert (other.exit_code, other.oom_killed) == (137, False)  # no new kill counted: a plain SIGKILL
