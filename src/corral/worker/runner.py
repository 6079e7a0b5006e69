"""Runs task attempts as real processes: one directory per attempt.

Orders repeat on every heartbeat until the reports show them done, so the runner acts on
each (task, attempt, action) once and ignores the repeats; what it remembers of an attempt goes
once the controller has its end (Runner.forget). Every process an attempt starts
is contained (docs/processes.md): in a cgroup of its own, which the worker kills when the
attempt ends and the worker's warden kills if the worker dies; or, without cgroups, under a
shim (corral.worker.shim) that is their subreaper: SIGTERM to the shim passes it on to all of
them, closing its lifeline (a pipe that also closes when the worker dies, even by SIGKILL)
kills them all, and the shim exits only once none is left. A worker starting up kills what a
predecessor left (corral.worker.containment.reap_leftovers).
Every attempt ends with exactly one terminal report, made only after its processes are
gone and its logs are flushed, so the controller never frees resources still in use and
never shows a finished task with half its output. A preempted attempt ends PREEMPTED, with
the epoch it was told and after its checkpoint (the file at CORRAL_CHECKPOINT_PATH, if the
task changed it) is uploaded; its next attempt finds that checkpoint at the same variable.
An attempt whose job asks for Python packages or an interpreter (pip, python) gets its environment
(corral.worker.environments) while BUILDING, once its working directory is ready, runs with it, and
holds it until it ends, so the cache never evicts an environment in use.
An interactive attempt (BuildOrder.interactive) runs on a PTY (corral.worker.terminal) that clients attach to
through the relay; relay orders open channels into a running attempt (corral.worker.channels): its terminal, an
exec in its environment and containment, or a port. An interactive attempt with no channel open for its idle
timeout is stopped as at its time limit, and an attempt with channels open warns them before a stop or preemption.
A worker that runs as root runs an attempt whose order names a local account (run_as, its owner's) as that account
(corral.worker.accounts): the task and its execs, in a directory of the account's alone. The worker's own helpers
(the shim, the shell that enters a cgroup) stay root and change user only in the exec of the task's command.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import corral
from corral.core.attempt_world import AttemptWorld
from corral.core.failure import ENVIRONMENT_BUILD_FAILED
from corral.core.log_limits import DEFAULT_LOG_LIMIT
from corral.core.protocol import (
    BuildOrder,
    Order,
    PreemptOrder,
    RelayOrder,
    StartOrder,
    StopOrder,
    TaskRef,
    TaskReport,
)
from corral.core.relay import CLOSE_CONFLICT
from corral.core.states import TaskState
from corral.core.wire import CLEAN_JSON
from corral.core.workdir import choose_start
from corral.worker.accounts import Account, NoAccount, worker_user
from corral.worker.bundles import extract
from corral.worker.channels import serve
from corral.worker.containment import attempt_cgroup, cgroup_parent, cgroup_prefix, reap_record
from corral.worker.entering import enter_program
from corral.worker.environments import Acquired, EnvironmentBuildError, EnvironmentCache
from corral.worker.logs import capture
from corral.worker.oom import CgroupMemory, MemoryRecord, killed_for_memory
from corral.worker.processes import (
    KILL_TIMEOUT,
    RECORD,
    cgroup_pids,
    descendants_of,
    empty_cgroups,
    kill_cgroup,
    read_stat,
    remove_empty_cgroup,
    signal_attempt,
)
from corral.worker.resources import gpu_env
from corral.worker.spawning import Child, spawn
from corral.worker.terminal import Outbox, Socket, Terminal, notice, open_pty, take_terminal

log = logging.getLogger("corral.worker.runner")

Report = Callable[[TaskReport], None]
FetchBundle = Callable[[str], Awaitable[Path]]
FlushLogs = Callable[[int, int], Awaitable[None]]
WatchLogs = Callable[[int, int, str], None]
FetchCheckpoint = Callable[[int, Path], Awaitable[None]]  # (task, destination)
SaveCheckpoint = Callable[[int, int, int, Path], Awaitable[str | None]]  # (task, attempt, epoch, file) -> error
Dial = Callable[[RelayOrder], AbstractAsyncContextManager[Socket]]  # the WebSocket back to the relay of an order

STOP_TIMEOUT = 2 * KILL_TIMEOUT  # how long a killed attempt (or its shim) may take to be gone before it is killed again
CAPTURE_TIMEOUT = 5.0  # how long the output still in the pipes may take to be written once the attempt is gone
NOTICE_TIMEOUT = 1.0  # how long a stop waits for its notice to reach the attached clients before it signals
TERMINAL_SIZE = (24, 80)  # an interactive task's window until its first writer attaches
# The worker's own tokens, if it was given them in its environment: a task gets only its job's CORRAL_TOKEN.
WORKER_SECRETS = frozenset({"CORRAL_TOKEN", "CORRAL_JOIN_TOKEN"})
# The shim and the warden run isolated from the task's Python settings (PYTHONPATH and the like) and without
# site-packages (-I -S), and load only their own modules from where this worker found corral: corral's packages
# are entered as bare namespaces, so a task's start pays for none of their imports.
_PACKAGE = Path(corral.__file__).parent


def _lean(module: str) -> list[str]:
    """The argv prefix that runs `main(sys.argv[1:])` of corral.worker.`module` in a lean interpreter."""
    return [sys.executable, "-I", "-S", "-c",
            "import sys, types\n"
            f"for name, path in (('corral', {str(_PACKAGE)!r}), ('corral.worker', {str(_PACKAGE / 'worker')!r})):\n"
            "    sys.modules[name] = package = types.ModuleType(name); package.__path__ = [path]\n"
            f"from corral.worker.{module} import main; main(sys.argv[1:])"]


_SHIM = _lean("shim")
_WARDEN = _lean("warden")


def _launch(command: list[str], cwd: str | Path, env: dict[str, str], record: str | Path, cgroup: str | Path | None,
            shim_options: Sequence[str] = (), account: Account | None = None, enter: str | None = None) -> list[str]:
    """The argv that runs `command`, as `account` when given: in its cgroup (which then holds every process it
    starts), through a shell that moves itself there and execs the command (through setpriv, which changes user),
    else under its shim (with `shim_options`; the shim changes user in the child it starts).

    The cgroup is entered by an exec'd program rather than a preexec_fn, which would make every start copy the
    worker with fork instead of vfork: a fifth of the array bench. That program is `enter` where the worker built
    one (corral.worker.entering: the shell's work without a shell, half the CPU of a task of `true`), else the
    shell. The user is changed the same way, after the cgroup is entered (a process that is no longer root may not
    move itself there), rather than with subprocess's user=, which runs before any of the child's code and would also
    rule out vfork. The program is looked up here first, so a missing one fails before anything starts, as it would
    with a direct exec.
    """
    _check_executable(command[0], cwd, env.get("PATH", os.defpath))
    if cgroup is None:
        user = ["--user", account.credentials()] if account else []
        return [*_SHIM, str(record), *user, *shim_options, "--", *command]
    change = [] if account is None else \
        [_setpriv(), f"--reuid={account.uid}", f"--regid={account.gid}",
         f"--groups={','.join(map(str, account.groups))}" if account.groups else "--clear-groups", "--"]
    if enter is not None:
        return [enter, str(cgroup), *change, *command]
    return ["/bin/sh", "-c", 'echo 0 > "$0/cgroup.procs" && exec "$@"', str(cgroup), *change, *command]


def _setpriv() -> str:
    """util-linux's setpriv, which a root worker with cgroups changes user with."""
    path = shutil.which("setpriv")
    if path is None:
        raise FileNotFoundError(errno.ENOENT, "setpriv (util-linux) is needed to run tasks as their owner", "setpriv")
    return path


# Where a program was last found on a PATH, by (program, PATH): its next start looks at that file again rather than
# at every directory before it (a stat each, eleven on the development machine: 28 us a start). Only a file in an
# absolute directory is kept, so the answer cannot depend on the start's working directory.
_FOUND: dict[tuple[str, str], str] = {}
_FOUND_KEPT = 256


def _check_executable(program: str, cwd: str | Path, path: str) -> None:
    """Raise what exec would raise for a program that is missing or not executable."""
    if os.sep in program:
        candidate = os.path.join(cwd, program)
        if not os.path.exists(candidate):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
        if not os.access(candidate, os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)
        return
    found = _FOUND.get((program, path))
    if found is not None and _runnable(found):
        return  # which would find it too, or one of the same name in a directory before it: the same answer
    found = shutil.which(program, path=path)
    if found is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    if os.path.isabs(found):
        if len(_FOUND) >= _FOUND_KEPT:
            _FOUND.clear()
        _FOUND[program, path] = found


def _runnable(file: str) -> bool:
    """What shutil.which asks of each file it looks at (a file that is missing is not accessible either)."""
    return os.access(file, os.X_OK) and not os.path.isdir(file)


def _private_directory(directory: str) -> None:
    """Make `directory` (and its parents), open to its owner alone. Called in a thread: a mkdir on a busy disk waits
    for the file system's journal, for a millisecond or, at worst, a hundred, and the worker's loop would wait with
    it, every other task's start, end and report too. Its parent (the work directory's `tasks`) is there but for the
    first: one mkdir, where makedirs first looks for the parent (a stat) in Python's steps."""
    try:
        os.mkdir(directory, 0o700)
    except FileNotFoundError:
        os.makedirs(directory, exist_ok=True)
    except OSError:  # as makedirs takes it: the directory there already, whatever the error said
        if not os.path.isdir(directory):
            raise
    os.chmod(directory, 0o700)


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return info.st_mtime_ns, info.st_size


def free_port() -> int:
    """A port no one listens on now, on every interface: a serving task's $PORT."""
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        return sock.getsockname()[1]


def _exit_status(returncode: int) -> tuple[int, str | None]:
    """asyncio's returncode as a shell would say it: a death by signal N is 128+N."""
    if returncode >= 0:
        return returncode, None
    return 128 - returncode, f"killed by signal {signal.Signals(-returncode).name}"


def _order_action(order: Order) -> str:
    """What makes an order a repeat within its attempt: its action, and a relay's session."""
    return f"relay {order.session}" if order.action == "relay" else order.action


@dataclass(eq=False)
class _Attempt:
    order: BuildOrder
    # Its directory, as a plain string: a task's start and end join a few names to it, and a Path costs microseconds
    # to make where a string's join costs nothing (`directory` makes the Path for what needs one).
    path: str
    lock: asyncio.Lock  # build, start and the end of a stop happen one at a time
    prepared: bool = False
    build: asyncio.Task | None = None
    process: Child | None = None  # the task, or its shim
    cgroup: str | None = None  # where the task runs in a cgroup of its own (no shim)
    captures: list[asyncio.Task] = field(default_factory=list)  # stdout and stderr, from pipes to files
    lifeline: int | None = None  # the write end of the shim's stdin: closing it kills the attempt
    supervisor: asyncio.Task | None = None
    stopping: asyncio.Task | None = None
    stop_reason: str | None = None
    stop_state: TaskState = TaskState.KILLED  # PREEMPTED when a preemption stopped it
    epoch: int | None = None  # the preemption order's epoch, acknowledged with the end
    checkpoint_stat: tuple[int, int] | None = None  # the checkpoint file as the attempt received it
    ended: bool = False
    silent: bool = False  # ended by the worker's own shutdown: the controller learns from the worker's loss
    memory_at_start: MemoryRecord = MemoryRecord()  # the cgroup's memory records when the process started
    world: AttemptWorld | None = None  # where it starts, once prepared
    environment: Acquired | None = None  # the Python environment of its job's pip/python, held until it ends
    account: Account | None = None  # the local account it runs as, where the worker runs as root; else the worker's
    env: dict[str, str] = field(default_factory=dict)  # the environment it started with, which its execs get too
    terminal: Terminal | None = None  # an interactive attempt's PTY
    channels: dict[object, Outbox | None] = field(default_factory=dict)  # open relay channels: what a stop warns
    idle_since: float = 0.0  # monotonic time its last channel closed, or it started
    idle_watch: asyncio.Task | None = None
    # What `exec` started in it, each with the write end of its shim's lifeline (None in a cgroup).
    execs: dict[Child, int | None] = field(default_factory=dict)

    @property
    def ref(self) -> tuple[int, int]:
        return self.order.task_id, self.order.attempt

    @functools.cached_property
    def directory(self) -> Path:
        return Path(self.path)

    @property
    def cwd(self) -> str:
        assert self.world is not None, "an attempt has a working directory once prepared"
        return self.world.directory

    @property
    def checkpoint(self) -> Path:
        return self.directory / "checkpoint"

    def close_lifeline(self) -> None:
        """Kill every process of the attempt that a shim holds: the task's and its execs'."""
        if self.lifeline is not None:
            os.close(self.lifeline)
            self.lifeline = None
        for process, lifeline in list(self.execs.items()):
            if lifeline is not None:
                os.close(lifeline)
                self.execs[process] = None

    def forget_ended_execs(self) -> None:
        """Let go of the execs that have exited, and of their lifelines: an attempt may run many over its life."""
        for process, lifeline in list(self.execs.items()):
            if process.returncode is not None:
                del self.execs[process]
                if lifeline is not None:
                    os.close(lifeline)

    @property
    def runs(self) -> bool:
        return self.process is not None and self.process.returncode is None and not self.ended


class Runner:
    """Acts on build, start and stop orders; reports every state change through `report`, in order."""

    def __init__(self, work_dir: Path, *, report: Report, fetch_bundle: FetchBundle, flush_logs: FlushLogs,
                 watch_logs: WatchLogs, gpus: int = 0, gpu_memory: Mapping[int, int] | None = None,
                 mps: bool = False, fetch_checkpoint: FetchCheckpoint | None = None,
                 save_checkpoint: SaveCheckpoint | None = None,
                 task_env: dict[str, str] | None = None, memory: CgroupMemory | None = None,
                 log_limit: int = DEFAULT_LOG_LIMIT, containment: str = "auto", filesystem: str | None = None,
                 shared_fs: Sequence[str] = (), environments: EnvironmentCache | None = None,
                 dial: Dial | None = None, name: str = "", as_root: bool | None = None) -> None:
        self.work_dir = work_dir
        self.name = name or socket.gethostname()  # this worker's, as a reason about it says
        # Whether tasks run as their owners (run_as): only a root worker can change user.
        self.run_as_owners = os.geteuid() == 0 if as_root is None else as_root
        self.user = worker_user()
        if self.run_as_owners:  # tasks may cross the worker's directories to their own, not list or read them
            (work_dir / "tasks").mkdir(parents=True, exist_ok=True)
            work_dir.chmod(0o711)
            (work_dir / "tasks").chmod(0o711)
        self.filesystem = filesystem  # the id of the file system its tasks see (corral.filesystem)
        self.shared_fs = list(shared_fs)  # directories shared with submitters on other machines
        self.environments = environments or EnvironmentCache(work_dir / "environments")
        self.log_limit = log_limit  # bytes kept per stream per attempt
        self.cgroups = cgroup_parent(containment)  # None: processes are tracked by the shim alone
        self.cgroup_prefix = cgroup_prefix(work_dir)  # its attempts' cgroups' names: found once (a path's resolve)
        self._tasks_dir = os.path.join(work_dir, "tasks")  # where the attempts' directories are, as a string
        self._warden = self._start_warden() if self.cgroups else None  # the write end of its lifeline
        # A task in a cgroup reads its stdin from /dev/null, opened once (and closed with the runner) rather than by
        # Popen at each start (subprocess.DEVNULL: an open and a close a task).
        self._devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        weakref.finalize(self, os.close, self._devnull)
        # What a task's processes enter their cgroup by: the built program, or None for the shell.
        self.enter = enter_program(self.cgroups) if self.cgroups else None
        self.gpus = gpus
        self.gpu_memory = dict(gpu_memory or {})  # device -> bytes, where NVML told
        self.mps = mps  # an MPS control daemon runs: a share's limits are set for it
        self._fetch_checkpoint = fetch_checkpoint
        self._save_checkpoint = save_checkpoint
        # What every task's environment starts from, made once: the worker's own but its secrets, then what every
        # task learns from this worker (task_env); the order's env goes over it.
        self._base_env = {**{name: value for name, value in os.environ.items() if name not in WORKER_SECRETS},
                          **(task_env or {})}
        self.memory = memory or CgroupMemory.of_this_process()
        self._report = report
        self._fetch_bundle = fetch_bundle
        self._flush_logs = flush_logs
        self._watch_logs = watch_logs
        self._dial = dial
        self._attempts: dict[tuple[int, int], _Attempt] = {}
        # Attempts that ended here (or were stopped before their build), and the actions acted on, by attempt: what
        # makes a repeated order a repeat. Each is kept until the controller has the attempt's end (forget).
        self._ended: set[tuple[int, int]] = set()
        self._acted: dict[tuple[int, int], set[str]] = {}
        self._tasks: set[asyncio.Task] = set()
        # Attempts that start once built with nothing to fetch or build, until started (`starting`): a worker running
        # a thousand tasks is not walked for each report of a wave.
        self._unstarted: set[tuple[int, int]] = set()

    def _start_warden(self) -> int:
        """The process that kills this worker's cgroups if the worker dies; it lives as long as the pipe returned."""
        assert self.cgroups is not None
        lifeline, held = os.pipe()
        try:
            subprocess.Popen([*_WARDEN, str(self.cgroups), self.cgroup_prefix, str(self.work_dir)],
                             stdin=lifeline, stdout=subprocess.DEVNULL, start_new_session=True)
        finally:
            os.close(lifeline)
        return held

    # orders ------------------------------------------------------------------------------

    def submit(self, order: Order) -> asyncio.Task | None:
        """Act on `order` in the background and return the task doing it (to await its end), or None when
        it is a repeat (or a start before its build)."""
        if not self._claim(order):
            return None
        handlers = {"build": self._build, "start": self._start, "stop": self._stop, "preempt": self._preempt,
                    "relay": self._relay}
        return self._spawn(handlers[order.action](order))

    def running(self) -> list[TaskRef]:
        """Attempts that hold something on this machine: building, prepared or with a live process."""
        return [TaskRef(task_id=t, attempt=a) for (t, a), att in self._attempts.items() if not att.ended]

    def holding(self) -> list[tuple[int, int]]:
        """The (task id, attempt) of every build taken and still remembered, as every heartbeat carries them: the
        controller need not give those builds again, which `submit` would ignore. That is more than `running`: a build
        whose task has not yet had its first turn (the heartbeat that follows the reply that brought it is often sent
        first), and an attempt that has ended but whose end the controller may not have yet (until `forget`)."""
        return [ref for ref, acted in self._acted.items() if "build" in acted]

    def ending(self) -> bool:
        """Whether an attempt's process has exited and its end is not yet reported: the report follows within a few
        turns of the loop (its cgroup removed, its captures ended, its logs flushed)."""
        return any(att.process is not None and att.process.returncode is not None for att in self._attempts.values())

    def starting(self) -> bool:
        """Whether an attempt that starts as soon as it is built, with nothing to fetch or build (no bundle, no
        Python environment), is not yet started: its start follows within turns of the loop."""
        for ref in list(self._unstarted):  # let go of those started, ended or gone since, and stop at one that is not
            att = self._attempts.get(ref)
            if att is None or att.ended or att.process is not None:
                self._unstarted.discard(ref)
            else:
                return True
        return False

    def forget(self, refs: Iterable[tuple[int, int]]) -> None:
        """Let go of what these ended attempts' repeated orders are known by: the controller has their ends, so it
        orders nothing for them any more, and the caller (corral.worker.agent) has no reply still to come that was
        read before it had them. Without it a worker would keep an attempt's worth for every attempt it ran."""
        for ref in refs:
            self._ended.discard(ref)
            self._acted.pop(ref, None)

    def forget_all(self) -> None:
        """Let go of every attempt's orders and end: the worker has a new identity, and no order for the old one
        is taken (corral.worker.agent)."""
        self._ended.clear()
        self._acted.clear()

    async def shutdown(self) -> None:
        """Stop every attempt (SIGTERM, its grace period, SIGKILL) without reporting them.

        Used when the worker goes away or was declared lost: the controller accounts for
        these attempts through the worker's loss, which lets them be retried; a KILLED report
        would end them for good.
        """
        while live := [att for att in self._attempts.values() if not att.ended]:
            for att in live:
                att.silent = True
            await asyncio.gather(*(self._halt(att, "worker shutting down", att.order.grace_period)
                                   for att in live))
        if self._warden is not None:  # nothing of ours is left for it to kill: let it go
            os.close(self._warden)
            self._warden = None

    # the actions -------------------------------------------------------------------------

    def _claim(self, order: Order) -> bool:
        ref, action = (order.task_id, order.attempt), _order_action(order)
        acted = self._acted.get(ref)
        if acted is not None and action in acted:
            return False
        if action == "start" and ref not in self._attempts:
            return False  # not built here: not claimed, so a start repeated after a build still counts
        if acted is None:
            acted = self._acted[ref] = set()
        acted.add(action)
        return True

    async def _build(self, order: BuildOrder) -> None:
        ref = (order.task_id, order.attempt)
        if ref in self._ended or ref in self._attempts:
            return  # stopped before it was built
        att = self._attempts[ref] = _Attempt(order, f"{self._tasks_dir}/{order.task_id}-{order.attempt}",
                                             asyncio.Lock())
        if order.start and not order.bundle and not order.pip and not order.python:
            self._unstarted.add(ref)
        att.build = self._spawn(self._prepare(att))  # its own task, so a stop can cancel it alone
        await asyncio.wait([att.build])
        # An independent task: no start order comes, and one that does is a repeat. One its build ended is gone.
        if order.start and ref in self._attempts:
            self._acted[ref].add("start")
            await self._start(StartOrder(task_id=order.task_id, attempt=order.attempt))

    async def _prepare(self, att: _Attempt) -> None:
        async with att.lock:
            self._emit(att.ref, TaskState.BUILDING)
            try:
                if self.run_as_owners and att.order.run_as:
                    att.account = Account.named(att.order.run_as, self.name)
                await asyncio.to_thread(_private_directory, att.path)
                att.world = self._world(att.order, att.path)
                if att.world.start == "bundle":
                    archive = await self._fetch_bundle(att.order.bundle)
                    await asyncio.to_thread(extract, archive, Path(att.cwd))
                if att.order.checkpoint and self._fetch_checkpoint is not None:
                    await self._restore_checkpoint(att)
                if att.account is not None:
                    await asyncio.to_thread(att.account.give, att.directory)
                if att.order.pip or att.order.python:
                    self._watch_logs(*att.ref, att.path)  # its build log is shipped like its output
                    att.environment = await self.environments.acquire(att.order.python, att.order.pip, Path(att.cwd),
                                                                      att.directory / "build")
            except EnvironmentBuildError as error:
                log.warning("task=%s attempt=%s environment build failed: %s", *att.ref, error)
                await self._end(att, TaskState.FAILED, reason=f"{ENVIRONMENT_BUILD_FAILED}: {error}")
                return
            except NoAccount as error:
                log.warning("task=%s attempt=%s: %s", *att.ref, error)
                await self._end(att, TaskState.FAILED, reason=str(error))
                return
            except Exception as error:
                log.warning("task=%s attempt=%s build failed: %s", *att.ref, error)
                await self._end(att, TaskState.FAILED, reason=f"build failed: {error}")
                return
            att.prepared = True
            self._emit(att.ref, TaskState.PREPARED, world=self._reported_world(att))

    def _world(self, order: BuildOrder, directory: str) -> AttemptWorld:
        """Where the attempt starts, by the rule of corral.core.workdir: the submission directory itself, an
        unpacked copy of its bundle, or its own empty directory. Raises WorkdirUnavailable when it can be none."""
        start = choose_start(order.workdir, order.bundle, self.filesystem, self.shared_fs, os.path.isdir)
        cwd = str(Path(order.workdir.path)) if start == "shared" and order.workdir else \
            f"{directory}/work" if start == "bundle" else directory
        return AttemptWorld(start=start, directory=cwd)

    @staticmethod
    def _reported_world(att: _Attempt) -> AttemptWorld:
        """Where the attempt starts and with which Python environment, as PREPARED reports it."""
        assert att.world is not None
        if att.environment is None:
            return att.world
        return att.world.model_copy(update=dict(
            env_key=att.environment.environment.key, env_seconds=round(att.environment.seconds, 3),
            env_cached=att.environment.cached))

    async def _start(self, order: StartOrder) -> None:
        att = self._attempts.get((order.task_id, order.attempt))
        if att is None:
            return
        async with att.lock:
            if att.ended or not att.prepared:
                return
            command = att.order.command
            env = {**self._base_env, **att.order.env}
            if att.environment is not None:
                env.update(att.environment.environment.task_env(env.get("PATH", os.defpath)))
            if self.gpus:
                env.update(gpu_env(att.order, self.gpu_memory, self.mps))
            if att.account is not None:
                env.update(att.account.env())
            env["CORRAL_CHECKPOINT_PATH"] = f"{att.path}/checkpoint"  # att.checkpoint, without making its Path
            att.memory_at_start = self.memory.read()
            port = free_port() if att.order.allocate_port else None
            if port is not None:
                env["PORT"] = str(port)
            att.env = env
            att.cgroup = attempt_cgroup(self.cgroups, self.cgroup_prefix, *att.ref) if self.cgroups else None
            lifeline, att.lifeline = os.pipe() if att.cgroup is None else (self._devnull, None)
            tty = att.order.interactive
            try:
                argv = _launch(command, att.cwd, env, f"{att.path}/{RECORD}", att.cgroup, ["--tty"] if tty else [],
                               att.account, self.enter)
                if att.cgroup is not None:  # a successor finds it by its name (cgroup_prefix)
                    with contextlib.suppress(FileExistsError):  # a name under a cgroup is a cgroup, or a kernel file
                        os.mkdir(att.cgroup)
                if tty:  # the terminal is read until no process holds its slave side, even if none starts
                    master, slave = open_pty(*TERMINAL_SIZE)
                    att.terminal = Terminal(master, att.directory / "stdout", self.log_limit)
                    att.captures = [self._spawn(att.terminal.pump())]
                    stdin = slave if att.cgroup is not None else lifeline  # the shim finds it as stdout
                    child_ends = stdout, stderr = slave, slave
                else:
                    # Pipes of our own, not the process's: its exit is seen even while a leftover child holds them.
                    # Their captures end when every writer has gone, or at once if the process does not start.
                    (out_read, stdout), (err_read, stderr) = os.pipe(), os.pipe()
                    att.captures = [self._spawn(capture(fd, f"{att.path}/{name}", self.log_limit))
                                    for name, fd in (("stdout", out_read), ("stderr", err_read))]
                    stdin, child_ends = lifeline, (stdout, stderr)
                try:
                    att.process = spawn(argv, att.cwd, env, stdin, stdout, stderr,
                                        preexec_fn=take_terminal if tty and att.cgroup is not None else None)
                finally:
                    for fd in set(child_ends):
                        os.close(fd)
            except Exception as error:
                att.close_lifeline()
                code = 127 if isinstance(error, FileNotFoundError) else 126 if isinstance(error, PermissionError) \
                    else None
                log.warning("task=%s attempt=%s cannot start %r: %s", *att.ref, command[:1], error)
                await self._end(att, TaskState.FAILED, exit_code=code, reason=f"cannot start {command[:1]}: {error}")
                return
            finally:
                if att.cgroup is None:
                    os.close(lifeline)
            self._watch_logs(*att.ref, att.path)
            log.info("task=%s attempt=%s running pid=%s", *att.ref, att.process.pid)
            self._emit(att.ref, TaskState.RUNNING, port=port)
            att.supervisor = self._spawn(self._supervise(att))
            if tty and att.order.idle_timeout is not None:
                att.idle_since = time.monotonic()
                att.idle_watch = self._spawn(self._watch_idle(att, att.order.idle_timeout))

    async def _watch_idle(self, att: _Attempt, timeout: float) -> None:
        """Stop the attempt, as at a time limit, once no channel has been open for `timeout` seconds."""
        while att.runs and att.stopping is None:
            left = timeout if att.channels else att.idle_since + timeout - time.monotonic()
            if left <= 0:
                self._terminate(att, f"idle timeout: no client attached for {timeout:g}s", att.order.grace_period)
                return
            await asyncio.sleep(left)

    async def _stop(self, order: StopOrder) -> None:
        ref = (order.task_id, order.attempt)
        att = self._attempts.get(ref)
        if att is not None:
            await self._warn(att, "stopped", order.reason, order.grace_period)
            await self._halt(att, order.reason, order.grace_period)
        elif ref not in self._ended:  # never built here: there is nothing to stop
            self._ended.add(ref)
            self._emit(ref, TaskState.KILLED, reason=order.reason)

    async def _preempt(self, order: PreemptOrder) -> None:
        ref = (order.task_id, order.attempt)
        att = self._attempts.get(ref)
        if att is not None:
            att.epoch = order.epoch
            await self._warn(att, "preempted", f"epoch {order.epoch}", order.grace_period)
            await self._halt(att, f"preempted (epoch {order.epoch})", order.grace_period, TaskState.PREEMPTED)
        elif ref not in self._ended:  # never built here: nothing to stop, acknowledge at once
            self._ended.add(ref)
            self._emit(ref, TaskState.PREEMPTED, reason="preempted before it was built here", epoch=order.epoch)

    async def _warn(self, att: _Attempt, what: str, reason: str, grace: float) -> None:
        """Tell the clients attached to a running attempt that it is being stopped, before it is signalled."""
        outboxes = [outbox for outbox in att.channels.values() if outbox is not None]
        if not outboxes or not att.runs or att.stopping is not None:
            return
        message = notice(att.order.job_id, what, reason, grace)
        for outbox in outboxes:
            outbox.control(message)
        await asyncio.wait([asyncio.create_task(outbox.drained()) for outbox in outboxes], timeout=NOTICE_TIMEOUT)

    async def _relay(self, order: RelayOrder) -> None:
        """Dial back for a channel a client opened into an attempt here, and serve it to its end."""
        att = self._attempts.get((order.task_id, order.attempt))
        if self._dial is None:
            log.warning("task=%s attempt=%s relay %s: this runner cannot dial", order.task_id, order.attempt,
                        order.kind)
            return
        dialed = False
        try:
            async with self._dial(order) as ws:
                dialed = True
                if att is None or not att.runs:
                    state = "not running yet" if att is not None and not att.ended else "not running any more"
                    await ws.close(CLOSE_CONFLICT, f"the task's attempt {order.attempt} is {state} on its worker")
                    return
                await serve(ws, order, _Place(self, att))
        except Exception as error:
            log.warning("task=%s attempt=%s relay %s %s: %r", order.task_id, order.attempt, order.kind,
                        "ended in error" if dialed else "not dialed, will try again when the order repeats", error)
            if not dialed and (acted := self._acted.get((order.task_id, order.attempt))) is not None:
                acted.discard(_order_action(order))

    async def _halt(self, att: _Attempt, reason: str, grace: float, state: TaskState = TaskState.KILLED) -> None:
        """Bring an attempt to its end (`state`) for `reason`, whatever it is doing; returns once it has ended."""
        if att.build is not None and not att.build.done():
            att.build.cancel()
            await asyncio.wait([att.build])
        async with att.lock:
            if att.process is None:
                await self._end(att, state, reason=reason)
                return
        self._terminate(att, reason, grace, state)
        assert att.supervisor is not None
        await asyncio.wait([att.supervisor])

    def _terminate(self, att: _Attempt, reason: str, grace: float, state: TaskState = TaskState.KILLED) -> None:
        """Begin stopping a running process group, unless it is stopping or has exited on its own."""
        assert att.process is not None
        if att.stopping is None and att.process.returncode is None:
            log.info("task=%s attempt=%s stopping (%s), grace %ss", *att.ref, reason, grace)
            att.stop_reason = reason
            att.stop_state = state
            att.stopping = self._spawn(self._end_attempt(att, grace))

    async def _end_attempt(self, att: _Attempt, grace: float) -> None:
        """SIGTERM to every process of the attempt, up to `grace` seconds to exit, then SIGKILL to all (the
        cgroup's, or the shim's once its lifeline closes)."""
        assert att.process is not None
        if att.cgroup is not None:
            signal_attempt(att.process.pid, cgroup_pids(att.cgroup), signal.SIGTERM)
        else:
            for process in (att.process, *att.execs):  # each shim passes it on
                if process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await att.process.wait()
            return
        if att.cgroup is not None:
            kill_cgroup(att.cgroup)
        att.close_lifeline()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(STOP_TIMEOUT):
                await att.process.wait()
            return
        log.error("task=%s attempt=%s pid=%s still alive %ss after it was killed: killing it again", *att.ref,
                  att.process.pid, STOP_TIMEOUT)
        with contextlib.suppress(ProcessLookupError):
            att.process.kill()

    async def _supervise(self, att: _Attempt) -> None:
        """Wait for the process, enforce the time limit, clean up the group, and report the outcome."""
        process = att.process
        assert process is not None
        try:
            async with asyncio.timeout(att.order.time_limit):
                await process.wait()
        except TimeoutError:
            self._terminate(att, "time limit", att.order.grace_period)
        returncode = await process.wait()
        if att.idle_watch is not None:
            att.idle_watch.cancel()
        if att.stopping is not None:
            await att.stopping
        att.close_lifeline()
        if att.cgroup is None:  # what a shim killed outright left behind
            await asyncio.to_thread(reap_record, att.directory / RECORD)
        elif not remove_empty_cgroup(att.cgroup):  # what the task left in its cgroup
            await asyncio.to_thread(empty_cgroups, [att.cgroup])
        await self._captured(att)
        exit_code, signalled = _exit_status(returncode)
        if att.stop_state is TaskState.PREEMPTED:
            reason = att.stop_reason + (f"; {signalled}" if signalled else f"; exit code {exit_code}")
            await self._end(att, TaskState.PREEMPTED, exit_code=exit_code, reason=reason)
        elif att.stop_reason is not None:
            await self._end(att, TaskState.KILLED, exit_code=exit_code, reason=att.stop_reason)
        elif exit_code == 0:
            await self._end(att, TaskState.SUCCEEDED, exit_code=0)
        elif killed_for_memory(exit_code, att.memory_at_start, self.memory.read()):
            await self._end(att, TaskState.FAILED, exit_code=exit_code, oom_killed=True,
                            reason=f"out of memory: {signalled or f'exit code {exit_code}'} "
                                   "(per the worker's memory cgroup)")
        else:
            await self._end(att, TaskState.FAILED, exit_code=exit_code, reason=signalled or f"exit code {exit_code}")

    async def _captured(self, att: _Attempt) -> None:
        """Let the output still in the pipes reach the files; a pipe some escaped process holds open is let go. Most
        captures have ended by the time their process is reaped (its exit closed their pipes), and a wait on ended
        tasks still costs a future, a timer and two turns of the loop: only one still reading is waited for."""
        if not all(capture.done() for capture in att.captures):
            _, pending = await asyncio.wait(att.captures, timeout=CAPTURE_TIMEOUT)
            for task in pending:
                task.cancel()

    async def _end(self, att: _Attempt, state: TaskState, *, exit_code: int | None = None,
                   reason: str | None = None, oom_killed: bool = False) -> None:
        """The one terminal report of an attempt, after its logs are flushed; later calls do nothing."""
        if att.ended:
            return
        att.ended = True
        self._ended.add(att.ref)
        if att.terminal is not None:
            att.terminal.finish(exit_code, reason)
        log.info("task=%s attempt=%s %s exit_code=%s reason=%s", *att.ref, state, exit_code, reason)

        async def finish() -> None:
            await self._flush_logs(*att.ref)
            problem = None
            if state is TaskState.PREEMPTED and not att.silent:
                problem = await self._upload_checkpoint(att)
            del self._attempts[att.ref]
            if att.environment is not None:
                await self.environments.release(att.environment.environment.key)
            if not att.silent:
                self._emit(att.ref, state, exit_code=exit_code, epoch=att.epoch,
                           reason=f"{reason}; {problem}" if problem else reason, oom_killed=oom_killed)

        # Shielded: a stop that cancels a failing build must not swallow the build's FAILED report.
        await asyncio.shield(self._spawn(finish()))

    # checkpoints -------------------------------------------------------------------------

    async def _restore_checkpoint(self, att: _Attempt) -> None:
        """Fetch the task's checkpoint to CORRAL_CHECKPOINT_PATH; a failure leaves the attempt to start afresh."""
        assert self._fetch_checkpoint is not None
        try:
            await self._fetch_checkpoint(att.order.task_id, att.checkpoint)
        except Exception as error:
            log.warning("task=%s attempt=%s checkpoint not restored, starting without it: %s", *att.ref, error)
            att.checkpoint.unlink(missing_ok=True)
            return
        att.checkpoint_stat = _stat(att.checkpoint)

    async def _upload_checkpoint(self, att: _Attempt) -> str | None:
        """Upload the checkpoint if the task wrote one during this attempt; returns why it could not."""
        current = _stat(att.checkpoint)
        if self._save_checkpoint is None or att.epoch is None or current is None or current == att.checkpoint_stat:
            return None
        return await self._save_checkpoint(att.order.task_id, att.order.attempt, att.epoch, att.checkpoint)

    # plumbing ----------------------------------------------------------------------------

    def _emit(self, ref: tuple[int, int], state: TaskState, *, exit_code: int | None = None,
              reason: str | None = None, epoch: int | None = None, oom_killed: bool = False,
              port: int | None = None, world: AttemptWorld | None = None) -> None:
        # Validated without the walk of its strings (WireModel), which could refuse none of them: they are the field
        # names, a TaskState and a reason made storable first (protocol._told); `world` is a model checked when made.
        # The walk was half of a report's making, four reports a task.
        self._report(TaskReport.model_validate(
            {"task_id": ref[0], "attempt": ref[1], "state": state, "exit_code": exit_code, "reason": reason,
             "at": time.time(), "epoch": epoch, "oom_killed": oom_killed, "port": port, "world": world},
            context=CLEAN_JSON))

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("runner action failed", exc_info=task.exception())


class _Place:
    """What a relay channel may do in its attempt (corral.worker.channels.Workplace)."""

    def __init__(self, runner: Runner, att: _Attempt) -> None:
        self.runner = runner
        self.att = att
        self.terminal = att.terminal

    @contextlib.contextmanager
    def attached(self, outbox: Outbox | None) -> Iterator[None]:
        key = object()
        self.att.channels[key] = outbox
        try:
            yield
        finally:
            del self.att.channels[key]
            if not self.att.channels:
                self.att.idle_since = time.monotonic()

    async def launch(self, command: list[str], stdin: int, stdout: int, stderr: int, tty: bool,
                     name: str) -> Child:
        """In the attempt's cgroup, or under a shim of its own whose lifeline the attempt's end closes."""
        att = self.att
        att.forget_ended_execs()
        lifeline: int | None = None
        if att.cgroup is not None:
            argv = _launch(command, att.cwd, att.env, f"{att.path}/{RECORD}", att.cgroup, account=att.account,
                           enter=self.runner.enter)
            process = spawn(argv, att.cwd, att.env, stdin, stdout, stderr, preexec_fn=take_terminal if tty else None)
        else:
            record = att.directory / "execs" / name / RECORD
            argv = _launch(command, att.cwd, att.env, record, None, ["--tty"] if tty else ["--stdin", str(stdin)],
                           att.account)
            record.parent.mkdir(parents=True, exist_ok=True)
            shim_end, lifeline = os.pipe()
            try:
                process = spawn(argv, att.cwd, att.env, shim_end, stdout, stderr, pass_fds=() if tty else (stdin,))
            except BaseException:
                os.close(lifeline)
                raise
            finally:
                os.close(shim_end)
        att.execs[process] = lifeline
        log.info("task=%s attempt=%s exec %r pid=%s", *att.ref, command[:1], process.pid)
        return process

    def signal(self, process: Child, sig: int) -> None:
        if process.returncode is not None:
            return
        leaders = [process.pid] if self.att.cgroup is not None else \
            [pid for pid in descendants_of(process.pid) if (stat := read_stat(pid)) and stat.ppid == process.pid]
        for leader in leaders:
            signal_attempt(leader, descendants_of(leader), sig)

    def log_pipes(self) -> tuple[int, int]:
        ends = []
        for name in ("stdout", "stderr"):
            read, write = os.pipe()
            self.att.captures.append(self.runner._spawn(capture(read, f"{self.att.path}/{name}",
                                                                self.runner.log_limit)))
            ends.append(write)
        return ends[0], ends[1]

    def pids(self) -> list[int]:
        att = self.att
        if att.cgroup is not None:
            return cgroup_pids(att.cgroup)
        shims = [process.pid for process in (att.process, *att.execs) if process and process.returncode is None]
        return [pid for shim in shims for pid in descendants_of(shim)]
