"""Job bundles on a worker: a content-addressed cache of archives, and their safe unpacking.

A bundle is named by the sha256 of its archive, so a cached file is reused by every task of
every job that ships the same directory, and a download that does not hash to its name is
refused rather than run.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import tarfile
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from pathlib import Path, PurePosixPath

Download = Callable[[str], AsyncIterator[bytes]]


class BundleError(Exception):
    """A bundle that cannot be used: bad digest, wrong content, unsafe member."""


class BundleCache:
    """`<directory>/<digest>.tar.gz`, filled on first use through `download(digest)`."""

    def __init__(self, directory: Path, download: Download) -> None:
        self.directory = directory
        self._download = download
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    async def fetch(self, digest: str) -> Path:
        """The cached archive of `digest`, downloaded and verified first if it is not here yet."""
        if not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise BundleError(f"not a sha256 digest: {digest!r}")
        path = self.directory / f"{digest}.tar.gz"
        async with self._locks[digest]:  # tasks of one gang on this worker download it once
            if path.exists():
                return path
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)  # the worker's: tasks unpack copies
            partial = path.with_suffix(f".part{os.getpid()}")
            sha = hashlib.sha256()
            try:
                with partial.open("wb") as out:
                    async for chunk in self._download(digest):
                        sha.update(chunk)
                        out.write(chunk)
                if sha.hexdigest() != digest:
                    raise BundleError(f"bundle {digest[:12]} downloaded with sha256 {sha.hexdigest()[:12]}")
                partial.replace(path)  # atomic: the cache never holds a half-written archive
            finally:
                partial.unlink(missing_ok=True)
        return path


def _check_member(member: tarfile.TarInfo) -> None:
    names = [member.name, member.linkname] if member.issym() or member.islnk() else [member.name]
    for name in names:
        pure = PurePosixPath(name)
        if pure.is_absolute() or ".." in pure.parts:
            raise BundleError(f"unsafe path in bundle: {name!r}")


def extract(archive: Path, destination: Path) -> None:
    """Unpack a tar.gz into `destination`, refusing absolute paths and `..` anywhere in it."""
    with tarfile.open(archive, "r:gz") as tar:
        members = tar.getmembers()
        for member in members:
            _check_member(member)
        destination.mkdir(parents=True, exist_ok=True)
        tar.extractall(destination, members=members, filter="data")
