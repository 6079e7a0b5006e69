"""Removes attempt directories (work files and logs) that ended longer ago than the worker's retention."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from pathlib import Path

from corral.core.log_limits import attempts_to_prune, prune_interval
from corral.worker.runner import Runner

log = logging.getLogger("corral.worker.retention")


def last_changes(tasks_dir: Path) -> dict[str, float]:
    """Each attempt directory with its newest change: its own, or that of a file in it (its logs)."""
    found = {}
    for directory in tasks_dir.glob("*-*"):
        with contextlib.suppress(FileNotFoundError):
            found[directory.name] = max([directory.stat().st_mtime,
                                         *(entry.stat().st_mtime for entry in directory.iterdir())])
    return found


def prune_attempts(tasks_dir: Path, live: set[str], now: float, retention: float) -> int:
    """One pass; returns how many attempt directories went. `live` ones (named task-attempt) stay."""
    doomed = attempts_to_prune(last_changes(tasks_dir), live, now, retention)
    for name in doomed:
        shutil.rmtree(tasks_dir / name, ignore_errors=True)
    return len(doomed)


async def prune_attempts_loop(runner: Runner, retention: float) -> None:
    while True:
        try:
            live = {f"{ref.task_id}-{ref.attempt}" for ref in runner.running()}
            if pruned := await asyncio.to_thread(prune_attempts, runner.work_dir / "tasks", live, time.time(),
                                                 retention):
                log.info("removed %d attempt directories that ended more than %.0fs ago", pruned, retention)
        except Exception:
            log.exception("pruning attempt directories failed; will try again")
        await asyncio.sleep(prune_interval(retention))
