"""Files the controller keeps beside its store: task logs and content-addressed bundles."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Literal, get_args

from corral.core.log_limits import DEFAULT_LOG_LIMIT, truncation_marker

Stream = Literal["stdout", "stderr", "build"]  # build: the output of its Python environment's build
STREAMS = get_args(Stream)
MAX_OFFSET = 2**40  # 1 TiB: past any log; a file system may refuse to write far beyond it
MAX_BUNDLE = 100 * 2**20


class LogFiles:
    """Each attempt's stdout and stderr, written at the offsets the worker ships them from, up to `limit` bytes
    each: what a worker ships past it is dropped, and the truncation marker stands at the limit instead."""

    def __init__(self, root: Path, limit: int = DEFAULT_LOG_LIMIT) -> None:
        self.root = root
        self.limit = limit

    def path(self, task_id: int, attempt: int, stream: str) -> Path:
        if stream not in STREAMS:
            raise ValueError(f"stream must be one of {', '.join(STREAMS)}, not {stream!r}")
        return self.root / f"task-{task_id}" / f"{attempt}.{stream}"

    def write(self, task_id: int, attempt: int, stream: str, offset: int, data: bytes) -> None:
        path = self.path(task_id, attempt, stream)
        over = offset + len(data) > self.limit
        if over:
            data = data[:max(0, self.limit - offset)]
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if data:
                os.pwrite(fd, data, offset)
            if over:  # the same bytes a worker with the same limit ships there: rewriting them changes nothing
                os.pwrite(fd, truncation_marker(self.limit), self.limit)
        finally:
            os.close(fd)

    def task_directories(self) -> dict[int, float]:
        """Each task that has logs, with when its directory last changed."""
        found = {}
        for entry in self.root.glob("task-*"):
            with contextlib.suppress(ValueError, FileNotFoundError):
                found[int(entry.name.removeprefix("task-"))] = entry.stat().st_mtime
        return found

    def remove(self, task_ids: Iterable[int]) -> None:
        """All attempts' logs of these tasks."""
        for task_id in task_ids:
            shutil.rmtree(self.root / f"task-{task_id}", ignore_errors=True)

    def read(self, task_id: int, attempt: int, stream: str, offset: int, limit: int = 4 * 2**20) -> tuple[bytes, int]:
        """(bytes from offset, total size); nothing stored yet reads as empty."""
        path = self.path(task_id, attempt, stream)
        try:
            with path.open("rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                handle.seek(offset)
                return handle.read(limit), size
        except FileNotFoundError:
            return b"", 0


class BundleStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path(self, digest: str) -> Path:
        if not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise ValueError("a bundle is named by the sha256 hex digest of its archive")
        return self.root / f"{digest}.tar.gz"

    def exists(self, digest: str) -> bool:
        return self.path(digest).exists()

    def put(self, digest: str, data: bytes) -> None:
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise ValueError(f"body has sha256 {actual}, not {digest}")
        tmp = self.path(digest).with_suffix(".partial")
        tmp.write_bytes(data)
        tmp.replace(self.path(digest))
