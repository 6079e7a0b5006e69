"""Checkpoints the controller keeps for preempted tasks: opaque bytes, one file per task.

A task's newest checkpoint replaces the one before; its next attempt gets it back. The bytes
are received into a staging file and only take the task's name once the store has recorded
them, so a refused or broken upload never replaces a good checkpoint.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

DEFAULT_LIMIT = 64 * 2**20


class TooLarge(ValueError):
    pass


class CheckpointFiles:
    def __init__(self, root: Path, limit: int = DEFAULT_LIMIT) -> None:
        self.root = root
        self.limit = limit
        root.mkdir(parents=True, exist_ok=True)

    def path(self, task_id: int) -> Path:
        return self.root / f"task-{task_id}"

    def too_large(self, size: int) -> str:
        return f"a checkpoint of {size} bytes is over the limit of {self.limit} bytes ({self.limit / 2**20:g} MiB)"

    async def receive(self, task_id: int, chunks: AsyncIterator[bytes]) -> tuple[Path, int]:
        """Write the upload to a staging file; TooLarge (and nothing kept) past the limit."""
        staging = self.root / f".task-{task_id}.{secrets.token_hex(4)}.partial"
        size = 0
        try:
            with staging.open("wb") as out:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > self.limit:
                        raise TooLarge(self.too_large(size))
                    out.write(chunk)
        except BaseException:
            staging.unlink(missing_ok=True)
            raise
        return staging, size

    def commit(self, staging: Path, task_id: int) -> None:
        os.replace(staging, self.path(task_id))
