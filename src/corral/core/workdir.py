"""Where a task starts: the rule that decides, on a worker, between the submission directory itself, an
unpacked copy of it (the job's bundle) and an empty directory. Pure, so scheduling and workers agree.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:  # spec's constraints check uses this module's rule through scheduling
    from corral.core.spec import Workdir

Start = Literal["shared", "bundle", "empty"]


class Located(Protocol):
    """A directory as its submitter's machine sees it: a Workdir, or scheduling's SharedDirectory."""

    @property
    def path(self) -> str: ...

    @property
    def filesystem(self) -> str: ...


class WorkdirUnavailable(Exception):
    """The job runs in its submission directory, this worker does not see it, and no copy was uploaded."""


def under(path: str, root: str) -> bool:
    """`path` is `root` or lies beneath it (both absolute; compared as written, after normalising)."""
    path, root = posixpath.normpath(path), posixpath.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def shares(workdir: Located, filesystem: str | None, shared_fs: Sequence[str]) -> bool:
    """A worker shares the submitter's directory when it sees the same file system (same machine and mount
    namespace), or when the directory lies under one of its `--shared-fs` directories (NFS and the like)."""
    return (filesystem is not None and filesystem == workdir.filesystem) or any(
        under(workdir.path, root) for root in shared_fs)


def choose_start(workdir: Workdir | None, bundle: str | None, filesystem: str | None, shared_fs: Sequence[str],
                 is_dir: Callable[[str], bool]) -> Start:
    """shared when this worker shares the directory and finds it there; else the bundle if there is one; else
    empty when the job named no directory. Raises WorkdirUnavailable when it named one that is not here."""
    if workdir is not None and shares(workdir, filesystem, shared_fs) and is_dir(workdir.path):
        return "shared"
    if bundle:
        return "bundle"
    if workdir is None:
        return "empty"
    if shares(workdir, filesystem, shared_fs):
        raise WorkdirUnavailable(f"{workdir.path} is not a directory on this worker, and the job's files were "
                                 "not uploaded")
    raise WorkdirUnavailable(f"this worker does not share the file system of {workdir.path}, and the job's files "
                             "were not uploaded")
