"""Helpers for the worker tests: a runner on real processes, and the tasks that test its containment."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import psutil
import pytest

from corral.core.protocol import BuildOrder, Order, TaskReport
from corral.worker.containment import cgroup_parent
from corral.worker.runner import Dial, Runner
from tests.waiting import wait_until

# The two ways an attempt's processes are contained; a test taking these as params runs under each.
CONTAINMENTS = [
    pytest.param("cgroup", marks=pytest.mark.skipif(cgroup_parent() is None,
                                                    reason="no writable cgroup v2 hierarchy on this machine")),
    "processes",
]

# A program that leaves a grandchild and a daemon (fork, setsid, fork again) and writes their pids to
# ARGV[1].main and ARGV[1].daemon: what a task's own process group and PR_SET_PDEATHSIG miss.
DAEMONIZER = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open(sys.argv[1] + ".daemon", "w").write(str(os.getpid()))
        time.sleep(300)
    os._exit(0)
open(sys.argv[1] + ".main", "w").write(str(os.getpid()))
time.sleep(300)
"""


def daemonizing_task(directory: Path, marker: str) -> tuple[list[str], Path]:
    """A `sh -c 'python3 prog.py; echo done'` task whose prog.py daemonizes; returns it and its pid file prefix."""
    program = directory / "prog.py"
    program.write_text(DAEMONIZER)
    prefix = directory / marker
    return ["sh", "-c", f"{sys.executable} {program} {prefix}; echo done"], prefix


def written_pids(prefix: Path) -> list[int] | None:
    """The pids of the daemonizer's main process and daemon, once it has written both."""
    files = [prefix.with_name(prefix.name + suffix) for suffix in (".main", ".daemon")]
    texts = [file.read_text() if file.exists() else "" for file in files]
    return [int(text) for text in texts] if all(texts) else None


def gone(pid: int) -> bool:
    """The process no longer runs: it does not exist, or is a zombie waiting for a reaper."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def build_order(command: list[str], task_id: int = 1, attempt: int = 0, **fields) -> BuildOrder:
    return BuildOrder(task_id=task_id, attempt=attempt, job_id=1, task_index=0, command=command,
                      env=fields.pop("env", {}), **fields)


class Harness:
    """A Runner on real processes, with its reports, bundle fetches and log flushes recorded."""

    def __init__(self, work_dir: Path, gpus: int = 0, bundles: dict[str, Path] | None = None,
                 containment: str = "auto", filesystem: str | None = None, shared_fs: tuple[str, ...] = (),
                 mps: bool = False, dial: Dial | None = None, as_root: bool | None = None) -> None:
        self.reports: list[TaskReport] = []
        self.flushed: list[tuple[int, int, int]] = []  # (task, attempt, reports made before the flush)
        self.bundles = bundles or {}
        self.checkpoints: dict[int, bytes] = {}  # what the controller holds, by task
        self.saved: list[tuple[int, int, int, bytes]] = []  # (task, attempt, epoch, bytes) uploads
        self.refuse_checkpoints: str | None = None  # an upload's refusal, when set
        self.runner = Runner(work_dir, report=self.reports.append, fetch_bundle=self._fetch,
                             flush_logs=self._flush, watch_logs=lambda *_: None, gpus=gpus, mps=mps,
                             fetch_checkpoint=self._fetch_checkpoint, save_checkpoint=self._save_checkpoint,
                             containment=containment, filesystem=filesystem, shared_fs=shared_fs, dial=dial,
                             name="w1", as_root=as_root)
        self.work_dir = work_dir

    async def _fetch_checkpoint(self, task_id: int, destination: Path) -> None:
        destination.write_bytes(self.checkpoints[task_id])

    async def _save_checkpoint(self, task_id: int, attempt: int, epoch: int, path: Path) -> str | None:
        if self.refuse_checkpoints:
            return self.refuse_checkpoints
        self.saved.append((task_id, attempt, epoch, path.read_bytes()))
        self.checkpoints[task_id] = path.read_bytes()
        return None

    async def _fetch(self, digest: str) -> Path:
        return self.bundles[digest]

    async def _flush(self, task_id: int, attempt: int) -> None:
        self.flushed.append((task_id, attempt, len(self.reports)))

    async def act(self, order: Order, timeout: float = 10.0) -> None:
        """Hand `order` to the runner as the worker does (`Runner.submit`) and wait until it is acted on."""
        acting = self.runner.submit(order)
        assert acting is not None, f"the runner took the {order.action} order for a repeat"
        async with asyncio.timeout(timeout):
            await acting

    def states(self, task_id: int = 1, attempt: int = 0) -> list[str]:
        return [r.state for r in self.reports if (r.task_id, r.attempt) == (task_id, attempt)]

    def last(self, task_id: int = 1, attempt: int = 0) -> TaskReport:
        return [r for r in self.reports if (r.task_id, r.attempt) == (task_id, attempt)][-1]

    def attempt_dir(self, task_id: int = 1, attempt: int = 0) -> Path:
        return self.work_dir / "tasks" / f"{task_id}-{attempt}"

    async def ended(self, task_id: int = 1, attempt: int = 0, timeout: float = 5.0) -> TaskReport:
        terminal = {"SUCCEEDED", "FAILED", "KILLED", "PREEMPTED"}
        await wait_until(lambda: terminal & set(self.states(task_id, attempt)), timeout, f"task {task_id} to end")
        return self.last(task_id, attempt)
