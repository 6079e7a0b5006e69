"""Python environments for jobs that ask for packages (`pip`) or an interpreter (`python`), built with uv.

An environment is a virtual environment under `<work_dir>/environments/<key>/`, where the key is the
sha256 of everything that decides its content: the interpreter's full version, the items in order, and
the content of every file an item points to (requirements files, wheels, project trees). Every task
that asks for the same set on this worker shares it; a changed file makes a new one. It is built
once: an asyncio lock per key within this worker, and a file lock per key between processes; it is
built in a temporary directory and renamed into place, so a directory under its key is always whole,
and a worker restarting finds its cache by scanning the directory.

uv is the binary of the `uv` package (never downloaded), and never downloads an interpreter
(UV_PYTHON_DOWNLOADS=never). Indexes, find-links and proxies are the worker's own uv/pip configuration
(its environment, its uv.toml): nothing here overrides them, and a job cannot name any. Items that are
paths are read from the attempt's working directory; uv runs from the cache directory, so a project
file in the job's directory configures nothing.

With `--env-cache-size`, the least recently used environments no running task uses are removed once
the cache is over its size.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import corral
from corral.core.attempt_world import CachedEnvironment
from corral.core.pip import ItemKind, PipItem, classify, python_matches
from corral.lifetime import dies_with_parent

log = logging.getLogger("corral.worker.environments")

META = "corral-env.json"  # written last into a built environment: its python, size and build time
PTH = "_corral_worker.pth"  # makes the worker's corral importable from the environment, after its own packages
LOCK_POLL = 0.05  # seconds between tries of another process's file lock
FAILURE_LINES = 8  # of uv's output, in the reason of a failed build
FAILURE_CHARS = 1500
SKIPPED_DIRS = frozenset({".git", "__pycache__", ".venv", ".mypy_cache", ".pytest_cache"})
DEFAULT_BUILD_TIMEOUT = 600.0
KEY = re.compile(r"[0-9a-f]{64}")
VERSION = re.compile(r"[0-9]{1,2}\.[0-9]{1,3}\.[0-9]{1,3}")


class EnvironmentBuildError(Exception):
    """The environment cannot be built from these inputs: the message says why, with uv's last lines."""


@dataclass(frozen=True)
class Interpreter:
    version: str  # full: 3.11.7
    path: str


@dataclass
class Environment:
    key: str
    path: Path
    python: str | None  # its interpreter's full version
    size: int = 0
    last_used: float = 0.0
    in_use: int = 0

    @property
    def bin(self) -> Path:
        return self.path / "bin"

    def task_env(self, path: str) -> dict[str, str]:
        """The variables a task runs with in this environment: its bin first on PATH, and VIRTUAL_ENV."""
        return {"PATH": f"{self.bin}{os.pathsep}{path}", "VIRTUAL_ENV": str(self.path),
                "CORRAL_PYTHON": str(self.bin / "python")}

    def view(self) -> CachedEnvironment:
        return CachedEnvironment(key=self.key, python=self.python, size=self.size, last_used=self.last_used,
                                 in_use=self.in_use)


@dataclass(frozen=True)
class Acquired:
    environment: Environment
    seconds: float  # building it, or waiting for another build of it
    cached: bool


def uv_binary() -> str:
    """uv's own binary; FileNotFoundError, like a missing binary, where the uv package is not installed, so a worker
    without it still runs tasks (only --pip and --python builds fail, each with that reason)."""
    try:
        from uv import find_uv_bin
    except ImportError:
        raise FileNotFoundError(errno.ENOENT, "the uv package is not installed where the worker runs", "uv") from None
    return find_uv_bin()


def uv_env() -> dict[str, str]:
    """The worker's environment (its uv/pip configuration) with interpreter downloads off."""
    env = {name: value for name, value in os.environ.items() if name != "VIRTUAL_ENV"}
    env.update(UV_PYTHON_DOWNLOADS="never", UV_NO_PROGRESS="1")
    return env


def own_interpreter() -> Interpreter:
    return Interpreter(".".join(map(str, sys.version_info[:3])), sys.executable)


def _yielding() -> None:
    """A preexec_fn: a low priority, and gone with the worker rather than left finishing its search."""
    dies_with_parent(signal.SIGKILL)()
    os.nice(10)


def discover_pythons(uv: str | None = None, nice: bool = False) -> list[Interpreter]:
    """The worker's own interpreter, then the CPython 3 interpreters uv finds installed here (no downloads). uv
    runs every interpreter it finds to ask its version: seconds of CPU, given up to running tasks when `nice`."""
    found = [own_interpreter()]
    try:
        listed = subprocess.run([uv or uv_binary(), "python", "list", "--only-installed", "--output-format", "json"],
                                capture_output=True, env=uv_env(), timeout=60, check=True,
                                preexec_fn=_yielding if nice else None).stdout
        entries = json.loads(listed)
    except (OSError, subprocess.SubprocessError, ValueError) as error:
        log.warning("no other Python found: uv python list failed: %s", error)
        return found
    for entry in entries:
        version, path = entry.get("version"), entry.get("path")
        if entry.get("implementation") != "cpython" or not version or not path or not version.startswith("3."):
            continue
        if not VERSION.fullmatch(version):
            continue  # free-threaded (3.13.0+freethreaded) and pre-release builds are not what `3.N` asks for
        if all(known.version != version for known in found):
            found.append(Interpreter(version, path))
    return found


def choose_interpreter(wanted: str | None, interpreters: Iterable[Interpreter]) -> Interpreter | None:
    """The worker's own interpreter when it matches (or nothing is asked), else the newest that matches."""
    candidates = list(interpreters)
    if not candidates:
        return None
    if wanted is None or python_matches(wanted, candidates[0].version):
        return candidates[0]
    matching = [i for i in candidates[1:] if python_matches(wanted, i.version)]
    return max(matching, key=lambda i: tuple(map(int, i.version.split("."))), default=None)


def environment_key(python: str, items: Iterable[PipItem], workdir: Path) -> str:
    """sha256 of the interpreter's version, the items in order, and the content of each file they point to."""
    digest = hashlib.sha256()
    digest.update(json.dumps({"python": python}).encode())
    for item in items:
        content = _content_hash(_resolve(item, workdir)) if item.kind is not ItemKind.REQUIREMENT else ""
        digest.update(json.dumps([str(item.kind), item.text, content]).encode())
    return digest.hexdigest()


def _resolve(item: PipItem, workdir: Path) -> Path:
    """The file or directory a path item names, which must exist inside the working directory (links included)."""
    root = workdir.resolve()
    path = (workdir / item.text).resolve()
    if not path.is_relative_to(root):
        raise EnvironmentBuildError(f"pip item {item.text!r} leads outside the working directory")
    if not path.exists():
        raise EnvironmentBuildError(f"pip item {item.text!r}: no such {item.kind} in the working directory")
    return path


def _content_hash(path: Path) -> str:
    digest = hashlib.sha256()
    if path.is_file():
        _hash_file(digest, path)
        return digest.hexdigest()
    for current, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info"))
        for name in sorted(files):
            file = Path(current) / name
            digest.update(str(file.relative_to(path)).encode() + b"\0")
            if file.is_file():
                _hash_file(digest, file)
    return digest.hexdigest()


def _hash_file(digest: hashlib._Hash, path: Path) -> None:
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)


def disk_usage(path: Path) -> int:
    total = 0
    for current, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(current, name)).st_size
    return total


def _worker_paths() -> list[str]:
    """Where the worker's corral and the packages it needs live, for the environment's .pth file."""
    paths = [str(Path(corral.__file__).resolve().parent.parent)]
    for name in ("purelib", "platlib"):
        if (path := sysconfig.get_paths()[name]) not in paths:
            paths.append(path)
    return paths


class EnvironmentCache:
    """The environments of one worker; `acquire` and `release` bracket each attempt that uses one."""

    def __init__(self, root: Path, *, build_timeout: float = DEFAULT_BUILD_TIMEOUT, max_size: int | None = None,
                 interpreters: list[Interpreter] | None = None, uv: str | None = None) -> None:
        self.root = root
        self.build_timeout = build_timeout
        self.max_size = max_size
        self.interpreters = interpreters if interpreters is not None else [own_interpreter()]
        self._uv = uv
        self.environments: dict[str, Environment] = {}
        self.generation = 0  # bumped on every change the controller should hear of
        self.builds = 0  # environments built by this process
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    @property
    def uv(self) -> str:
        if self._uv is None:
            self._uv = uv_binary()
        return self._uv

    def scan(self) -> None:
        """Find the environments a previous worker built here, and remove what half-done builds left."""
        self.root.mkdir(parents=True, exist_ok=True)
        for entry in self.root.iterdir():
            if entry.name.startswith((".build-", ".trash-")):
                handle = self._try_lock(entry.name.split("-")[1])
                if handle is not None:  # no other process builds it now
                    shutil.rmtree(entry, ignore_errors=True)
                    handle.close()
            elif entry.is_dir() and (environment := self._load(entry)) is not None:
                self.environments[environment.key] = environment
        self.generation += 1
        for trash in self._evict():
            shutil.rmtree(trash, ignore_errors=True)

    def listing(self) -> list[CachedEnvironment]:
        return [environment.view() for environment in self.environments.values()]

    async def acquire(self, python: str | None, pip: list[str], workdir: Path, build_log: Path) -> Acquired:
        """The environment of these inputs, built first (its output in `build_log`) unless this worker has it."""
        started = time.monotonic()
        interpreter = choose_interpreter(python, self.interpreters)
        if interpreter is None:
            raise EnvironmentBuildError(f"this worker has no python {python}")
        items = [classify(item) for item in pip]
        if all(item.kind is ItemKind.REQUIREMENT for item in items):  # no file to read: no thread to wait for
            key = environment_key(interpreter.version, items, workdir)
        else:
            key = await asyncio.to_thread(environment_key, interpreter.version, items, workdir)
        cached = True
        async with self._locks[key]:
            environment = self.environments.get(key)
            if environment is None or not environment.path.is_dir():
                async with self._locked(key):
                    environment = await asyncio.to_thread(self._load, self.root / key)
                    if environment is None:
                        environment = await self._build(key, interpreter, items, workdir, build_log)
                        cached = False
                self.environments[key] = environment
            environment.in_use += 1
            environment.last_used = time.time()
            with contextlib.suppress(OSError):
                os.utime(environment.path / META)
        self.generation += 1
        await self._remove(self._evict())
        return Acquired(environment, time.monotonic() - started, cached)

    async def release(self, key: str) -> None:
        environment = self.environments.get(key)
        if environment is not None and environment.in_use:
            environment.in_use -= 1
            self.generation += 1
            await self._remove(self._evict())

    @staticmethod
    async def _remove(trash: list[Path]) -> None:
        """Delete evicted environments off the worker's loop: a virtualenv is thousands of files."""
        for path in trash:
            await asyncio.to_thread(shutil.rmtree, path, True)

    # building ----------------------------------------------------------------------------

    async def _build(self, key: str, interpreter: Interpreter, items: list[PipItem], workdir: Path,
                     build_log: Path) -> Environment:
        target = self.root / key
        building = self.root / f".build-{key}-{secrets.token_hex(4)}"
        args = install_args(items, workdir)
        log.info("building environment %s: python %s, %s", key[:12], interpreter.version, " ".join(args) or "-")
        try:
            with build_log.open("ab") as output:
                output.write(f"corral: environment {key[:12]}: python {interpreter.version}\n".encode())
                output.flush()
                try:
                    async with asyncio.timeout(self.build_timeout):
                        await self._uv_run(["venv", "--relocatable", "--python", interpreter.path, str(building)],
                                           output)
                        if args:
                            await self._uv_run(["pip", "install", "--python", str(building / "bin" / "python"),
                                                *args], output)
                except TimeoutError:
                    output.write(f"corral: build timed out after {self.build_timeout:g}s\n".encode())
                    raise EnvironmentBuildError(f"timed out after {self.build_timeout:g}s") from None
            await asyncio.to_thread(self._finish, building, interpreter)
            try:
                building.rename(target)
            except OSError:  # another process got there first despite the lock: theirs is as good
                await asyncio.to_thread(shutil.rmtree, building, True)
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, building, True)
            raise
        self.builds += 1
        environment = self._load(target)
        assert environment is not None
        log.info("environment %s built: %d bytes", key[:12], environment.size)
        return environment

    async def _uv_run(self, args: list[str], output: IO[bytes]) -> None:
        output.flush()
        start = output.tell()
        process = await asyncio.create_subprocess_exec(
            self.uv, *args, cwd=self.root, env=uv_env(), stdin=subprocess.DEVNULL, stdout=output,
            stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = await process.wait()
        except BaseException:  # cancelled (the attempt was stopped) or timed out: uv goes too
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
            raise
        if code != 0:
            output.flush()
            raise EnvironmentBuildError(_last_lines(Path(output.name), start) or f"uv {args[0]} exited with {code}")

    def _finish(self, building: Path, interpreter: Interpreter) -> None:
        """Make the worker's corral importable (same Python only, after the environment's own packages), then write
        the metadata that marks the environment whole."""
        if interpreter.version.split(".")[:2] == [str(part) for part in sys.version_info[:2]]:
            site = building / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
            if site.is_dir():
                (site / PTH).write_text("".join(f"{path}\n" for path in _worker_paths()))
        meta = {"python": interpreter.version, "size": disk_usage(building), "built_at": time.time()}
        (building / META).write_text(json.dumps(meta))

    # the cache ---------------------------------------------------------------------------

    def _load(self, path: Path) -> Environment | None:
        """The environment built whole in `path`, or None (no key for a name, no metadata: not one of ours)."""
        if not KEY.fullmatch(path.name):
            return None
        try:
            meta = json.loads((path / META).read_text())
            last_used = (path / META).stat().st_mtime
        except (OSError, ValueError):
            return None
        python = str(meta.get("python", ""))
        return Environment(path.name, path, python if VERSION.fullmatch(python) else None, int(meta.get("size", 0)),
                           last_used)

    def _evict(self) -> list[Path]:
        """Take the least recently used environments no task uses out of the cache until it fits its size: each is
        renamed out of place at once (so no task can acquire it), and returned for deleting."""
        trash_dirs: list[Path] = []
        if self.max_size is None:
            return trash_dirs
        total = sum(environment.size for environment in self.environments.values())
        for environment in sorted(self.environments.values(), key=lambda e: e.last_used):
            if total <= self.max_size:
                break
            if environment.in_use:
                continue
            handle = self._try_lock(environment.key)
            if handle is None:  # another process is using the key now
                continue
            try:
                trash = self.root / f".trash-{environment.key}-{secrets.token_hex(4)}"
                environment.path.rename(trash)
                trash_dirs.append(trash)
            except OSError as error:
                log.info("environment %s not evicted: %s", environment.key[:12], error)
                continue
            finally:
                handle.close()
            log.info("environment %s evicted (%d bytes; cache over %d bytes)", environment.key[:12],
                     environment.size, self.max_size)
            del self.environments[environment.key]
            total -= environment.size
            self.generation += 1
        return trash_dirs

    def _try_lock(self, key: str) -> IO | None:
        """The lock of one key between processes (held while the file stays open), or None if another holds it."""
        self.root.mkdir(parents=True, exist_ok=True)
        handle = (self.root / f".{key}.lock").open("a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return None
        return handle

    @contextlib.asynccontextmanager
    async def _locked(self, key: str) -> AsyncIterator[None]:
        """The file lock of `key`, waited for without blocking the worker's loop."""
        while (handle := self._try_lock(key)) is None:
            await asyncio.sleep(LOCK_POLL)
        try:
            yield
        finally:
            handle.close()


def install_args(items: Iterable[PipItem], workdir: Path) -> list[str]:
    """The items as `uv pip install` takes them, paths made absolute (uv runs from the cache directory)."""
    args: list[str] = []
    for item in items:
        if item.kind is ItemKind.REQUIREMENT:
            args.append(item.text)
        else:
            args += [*(["-r"] if item.kind is ItemKind.REQUIREMENTS_FILE else []), str(workdir / item.text)]
    return args


def _last_lines(path: Path, start: int) -> str:
    """The last lines of what the failed uv command wrote from `start` on: what the reason of a failed build shows,
    less uv's notes on which interpreter and environment it used."""
    try:
        with path.open("rb") as handle:
            handle.seek(max(start, handle.seek(0, 2) - 16 * 1024))
            text = handle.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [line.rstrip() for line in text.splitlines() if line.strip() and not line.startswith("Using ")]
    return "\n".join(lines[-FAILURE_LINES:])[-FAILURE_CHARS:]
