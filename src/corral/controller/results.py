"""Function results: one file per task attempt beside the logs, written by the task itself, size-limited."""

from __future__ import annotations

import asyncio
from pathlib import Path

from corral.waiting import woken

MAX_RESULT = 16 * 2**20  # a return value is a result, not a data set: larger ones belong in storage


class ResultFiles:
    """Written once per attempt; readers waiting for one are woken as soon as any is written."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._written = asyncio.Event()

    def path(self, task_id: int, attempt: int) -> Path:
        return self.root / f"task-{task_id}" / f"{attempt}.pkl"

    def write(self, task_id: int, attempt: int, data: bytes) -> None:
        path = self.path(task_id, attempt)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_bytes(data)
        partial.replace(path)  # a reader never sees half a result
        self._written.set()
        self._written = asyncio.Event()

    async def written(self, timeout: float) -> None:
        """Returns when a result is written, or after `timeout` seconds."""
        await woken(self._written, timeout)

    def read(self, task_id: int, attempt: int) -> bytes | None:
        try:
            return self.path(task_id, attempt).read_bytes()
        except FileNotFoundError:
            return None
