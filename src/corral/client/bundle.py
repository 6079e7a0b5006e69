"""The working-directory bundle: a tar.gz that is byte-identical for identical trees.

Determinism lets the client skip the upload when the controller already stores the same digest.
What git would not commit is left out: the rules of every `.gitignore` in the tree (each applies
beneath its own directory, deeper ones last, as git reads them) and of `.corralignore` files,
which use the same syntax for what git keeps but tasks do not need.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import pathspec

from corral.client.errors import CorralError
from corral.core.spec_text import format_bytes

MAX_BUNDLE = 100 * 2**20  # the controller refuses larger bodies
SKIPPED_DIRS = frozenset({".git", ".venv", "__pycache__"})
IGNORE_FILES = (".gitignore", ".corralignore")
NAMED_WHEN_TOO_LARGE = 5  # the biggest files the size-cap error names

# (directory relative to the root, with a trailing "/" or "" for the root; its rules)
_Rules = tuple[tuple[str, pathspec.GitIgnoreSpec], ...]


def make_bundle(directory: str | os.PathLike | None, max_size: int = MAX_BUNDLE,
                extra: Mapping[str, bytes] | None = None) -> bytes:
    """Archive `directory` (if any): sorted entries, mtime 0, owner 0, skipping VCS, virtualenv and bytecode
    folders and what its ignore files exclude; then the `extra` files, given as name -> content (a function
    job's payload)."""
    root = Path(directory) if directory is not None else None
    if root is not None and not root.is_dir():
        what = "does not exist" if not root.exists() else "is not a directory"
        raise CorralError(None, f"--workdir {root}: {what}")
    buffer = _LimitedBuffer(max_size)
    try:
        with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0) as zipped, \
                tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as archive:
            for path in bundled_paths(root) if root is not None else ():
                _add(archive, root, path)
            for name, content in sorted((extra or {}).items()):
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(content), 0o644
                archive.addfile(info, io.BytesIO(content))
    except _TooLarge:
        raise CorralError(None, _too_large(root, max_size)) from None
    return buffer.getvalue()


def bundled_paths(root: Path) -> Iterator[Path]:
    """What a bundle of `root` holds, depth-first with names sorted, so the order does not depend on the file
    system."""
    yield from _walk(root, root, ())


def _walk(root: Path, directory: Path, rules: _Rules) -> Iterator[Path]:
    relative = directory.relative_to(root).as_posix()
    base = "" if relative == "." else relative + "/"
    rules = rules + tuple((base, spec) for name in IGNORE_FILES if (spec := _rules_of(directory / name)))
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        path = Path(entry.path)
        is_dir = entry.is_dir(follow_symlinks=False)
        if is_dir and entry.name in SKIPPED_DIRS:
            continue
        if _ignored(base + entry.name + ("/" if is_dir else ""), rules):
            continue  # an ignored directory is left out whole, as git does
        yield path
        if is_dir:
            yield from _walk(root, path, rules)


def _rules_of(path: Path) -> pathspec.GitIgnoreSpec | None:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    except OSError as error:
        raise CorralError(None, f"cannot read {path}: {error.strerror}") from None
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _ignored(relative: str, rules: _Rules) -> bool:
    """The last rule that decides wins: deeper files over shallower, later lines over earlier (`!` re-includes)."""
    ignored = False
    for base, spec in rules:
        if not relative.startswith(base):
            continue
        decision = spec.check_file(relative[len(base):]).include
        if decision is not None:
            ignored = decision
    return ignored


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


def _too_large(root: Path | None, limit: int) -> str:
    """One line: the cap, the biggest files that would be bundled, and the ways out."""
    cap = f"over {limit // 2**20} MiB compressed"
    if root is None:
        return f"the function's payload is {cap}: pass large data through files or storage, not as arguments"
    sizes = sorted(((p.stat().st_size, p) for p in bundled_paths(root) if p.is_file() and not p.is_symlink()),
                   key=lambda item: (-item[0], str(item[1])))
    biggest = ", ".join(f"{p.relative_to(root).as_posix()} ({format_bytes(size)})"
                        for size, p in sizes[:NAMED_WHEN_TOO_LARGE])
    return (f"the files of {root} to upload are {cap} (biggest: {biggest}); list data sets and build outputs in "
            f"a .corralignore, or pass --no-workdir to run without them")


MEMO_ENTRIES = 200  # directories whose last bundle digest is remembered


class TreeMemo:
    """The digest a directory's bundle had when its files last looked as they do now, so that submitting an
    unchanged tree again archives and hashes nothing: only a HEAD asks whether the controller still has it.

    "Looks" is each bundled path's kind, size, modification time and executable bit (as rsync and make judge
    a change); the memo lives in the user's cache directory, and a memo that cannot be read or written is
    only a cache missed.
    """

    def __init__(self, directory: str | os.PathLike, path: Path | None = None) -> None:
        self.root = str(Path(directory).resolve())
        self.path = path or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "corral" / "bundles.json"
        self.signature = tree_signature(Path(self.root))

    def digest(self) -> str | None:
        entry = self._read().get(self.root)
        return entry["digest"] if isinstance(entry, dict) and entry.get("signature") == self.signature else None

    def remember(self, digest: str) -> None:
        entries = {k: v for k, v in self._read().items() if k != self.root}
        entries = dict(list(entries.items())[-(MEMO_ENTRIES - 1):]) | {self.root: {"signature": self.signature,
                                                                                   "digest": digest}}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=self.path.parent, delete=False) as out:
                json.dump(entries, out)
            os.replace(out.name, self.path)
        except OSError:
            pass

    def _read(self) -> dict:
        try:
            entries = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return entries if isinstance(entries, dict) else {}


def tree_signature(root: Path) -> str:
    """A hash of what the bundle of `root` would hold, read from the paths' metadata alone."""
    sha = hashlib.sha256()
    for path in bundled_paths(root):
        info = path.lstat()
        link = os.readlink(path) if path.is_symlink() else ""
        sha.update(f"{path.relative_to(root).as_posix()}\0{info.st_mode}\0{info.st_size}\0{info.st_mtime_ns}"
                   f"\0{link}\n".encode("utf-8", "surrogateescape"))
    return sha.hexdigest()


class _TooLarge(Exception):
    pass


class _LimitedBuffer(io.BytesIO):
    """Stops the archiving as soon as the compressed size passes the limit, not after."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def write(self, data) -> int:
        if self.tell() + len(data) > self.limit:
            raise _TooLarge
        return super().write(data)
