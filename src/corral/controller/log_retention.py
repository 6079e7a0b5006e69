"""Removes the logs of jobs that ended longer ago than the retention setting, now and then."""

from __future__ import annotations

import asyncio
import logging
import time

from corral.controller.files import LogFiles
from corral.core.log_limits import logs_to_prune, prune_interval
from corral.store.handler_locks import HandlerBusy
from corral.store.retention import job_finish_times
from corral.store.store import Store

log = logging.getLogger("corral.controller.logs")


async def prune_logs(store: Store, logs: LogFiles, now: float, retention: float) -> int:
    """One pass: remove what `logs_to_prune` says; returns how many tasks' logs went.

    The file system work runs in a thread: thousands of directories must not hold up the API. It runs as the
    handler PruneLogs (one controller at a time in a shared data directory), holding only a read.
    """
    async with store.read("PruneLogs") as connection:
        on_disk = await asyncio.to_thread(logs.task_directories)
        finished = await job_finish_times(connection, on_disk)
        doomed = logs_to_prune(on_disk, finished, now, retention)
        await asyncio.to_thread(logs.remove, doomed)
    return len(doomed)


async def prune_logs_loop(store: Store, logs: LogFiles, retention: float) -> None:
    while True:
        try:
            if pruned := await prune_logs(store, logs, time.time(), retention):
                log.info("removed the logs of %d task(s) whose jobs ended more than %.0fs ago", pruned, retention)
        except HandlerBusy:
            pass  # another controller prunes now
        except Exception:
            log.exception("pruning logs failed; will try again")
        await asyncio.sleep(prune_interval(retention))
