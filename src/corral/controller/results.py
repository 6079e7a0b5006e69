"""Function results: one file per task attempt beside the logs, written by the task itself, size-limited."""

from __future__ import annotations

from pathlib import Path

MAX_RESULT = 16 * 2**20  # a return value is a result, not a data set: larger ones belong in storage


class ResultFiles:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, task_id: int, attempt: int) -> Path:
        return self.root / f"task-{task_id}" / f"{attempt}.pkl"

    def write(self, task_id: int, attempt: int, data: bytes) -> None:
        path = self.path(task_id, attempt)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_bytes(data)
        partial.replace(path)  # a reader never sees half a result

    def read(self, task_id: int, attempt: int) -> bytes | None:
        try:
            return self.path(task_id, attempt).read_bytes()
        except FileNotFoundError:
            return None
