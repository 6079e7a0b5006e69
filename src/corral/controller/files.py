"""Files the controller keeps beside its store: task logs and content-addressed bundles."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Literal, get_args

Stream = Literal["stdout", "stderr"]
STREAMS = get_args(Stream)
MAX_OFFSET = 2**40  # 1 TiB: past any log; a file system may refuse to write far beyond it
MAX_BUNDLE = 100 * 2**20


class LogFiles:
    """Each attempt's stdout and stderr, written at the offsets the worker ships them from."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, task_id: int, attempt: int, stream: str) -> Path:
        if stream not in STREAMS:
            raise ValueError(f"stream must be one of {', '.join(STREAMS)}, not {stream!r}")
        return self.root / f"task-{task_id}" / f"{attempt}.{stream}"

    def write(self, task_id: int, attempt: int, stream: str, offset: int, data: bytes) -> None:
        path = self.path(task_id, attempt, stream)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, data, offset)
        finally:
            os.close(fd)

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
