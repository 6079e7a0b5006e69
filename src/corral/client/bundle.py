"""The working-directory bundle: a tar.gz that is byte-identical for identical trees.

Determinism lets the client skip the upload when the controller already stores the same digest.
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from collections.abc import Mapping
from pathlib import Path

from corral.client.errors import CorralError

MAX_BUNDLE = 100 * 2**20  # the controller refuses larger bodies
SKIPPED_DIRS = frozenset({".git", ".venv", "__pycache__"})


def make_bundle(directory: str | os.PathLike | None, max_size: int = MAX_BUNDLE,
                extra: Mapping[str, bytes] | None = None) -> bytes:
    """Archive `directory` (if any): sorted entries, mtime 0, owner 0, skipping VCS, virtualenv and bytecode
    folders; then the `extra` files, given as name -> content (a function job's payload)."""
    root = Path(directory) if directory is not None else None
    if root is not None and not root.is_dir():
        raise CorralError(None, f"--workdir {root}: not a directory")
    buffer = _LimitedBuffer(max_size, root or Path("the function's payload"))
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0) as zipped, \
            tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path in _walk(root) if root is not None else ():
            _add(archive, root, path)
        for name, content in sorted((extra or {}).items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(content), 0o644
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def _walk(root: Path):
    """Depth-first, names sorted, so the order does not depend on the file system."""
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        path = Path(entry.path)
        if entry.is_dir(follow_symlinks=False):
            if entry.name in SKIPPED_DIRS:
                continue
            yield path
            yield from _walk(path)
        else:
            yield path


def _add(archive: tarfile.TarFile, root: Path, path: Path) -> None:
    info = archive.gettarinfo(str(path), arcname=path.relative_to(root).as_posix())
    if not (info.isfile() or info.isdir() or info.issym()):
        return  # sockets, fifos and devices have no place in a bundle
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    # Only the executable bit matters; the rest would differ with the umask of whoever checked the tree out.
    if info.isfile():
        info.mode = 0o755 if info.mode & 0o111 else 0o644
    elif info.isdir():
        info.mode = 0o755
    if info.isfile():
        with path.open("rb") as handle:
            archive.addfile(info, handle)
    else:
        archive.addfile(info)


class _LimitedBuffer(io.BytesIO):
    """Stops the archiving as soon as the compressed size passes the limit, not after."""

    def __init__(self, limit: int, root: Path) -> None:
        super().__init__()
        self.limit = limit
        self.root = root

    def write(self, data) -> int:
        if self.tell() + len(data) > self.limit:
            raise CorralError(None, f"the bundle of {self.root} is over {self.limit // 2**20} MiB compressed; "
                                    "move data sets and build outputs out of --workdir")
        return super().write(data)
