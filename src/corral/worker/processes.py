"""The process primitives an attempt's shim needs: /proc, the record, signals, an attempt's cgroup.

Every task starts under a shim (corral.worker.shim), so every import here is paid at every task's
start: this module uses only the cheapest parts of the standard library (no pathlib, dataclasses,
subprocess or logging) and reads /proc itself. Paths are plain strings or anything `os.fspath` takes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections import namedtuple
from collections.abc import Iterable

RECORD = "processes.json"  # in each attempt's directory, while the attempt may have processes
KILL_TIMEOUT = 5.0  # how long SIGKILLed processes may take to vanish (a process in D state) before we move on

# The fields of /proc/PID/stat that identify a process and where it belongs; `start` is in clock ticks after
# boot: with the pid, a process's identity.
ProcStat = namedtuple("ProcStat", "pid ppid pgid sid start zombie", defaults=(False,))


def parse_stat(text: str) -> ProcStat:
    """/proc/PID/stat; the command name may hold spaces and parentheses, so fields are read after the last ')'."""
    head, _, tail = text.rpartition(")")
    fields = tail.split()
    return ProcStat(pid=int(head.split("(", 1)[0]), ppid=int(fields[1]), pgid=int(fields[2]), sid=int(fields[3]),
                    start=int(fields[19]), zombie=fields[0] in ("Z", "X"))


def read_stat(pid: int) -> ProcStat | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return parse_stat(stat.read())
    except (OSError, ValueError, IndexError):
        return None


def all_processes() -> list[ProcStat]:
    """Every live process on the machine (zombies left out: they hold nothing but a pid)."""
    found = (read_stat(int(name)) for name in os.listdir("/proc") if name.isdigit())
    return [stat for stat in found if stat is not None and not stat.zombie]


def descendants(root: int, processes: Iterable[ProcStat]) -> set[int]:
    children: dict[int, list[int]] = {}
    for stat in processes:
        children.setdefault(stat.ppid, []).append(stat.pid)
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def descendants_of(root: int) -> set[int]:
    """The pids below `root`, read down its children lists (as cheap as the tree is small), or from a scan of
    every process where the kernel keeps no such lists."""
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # gone meanwhile
        for thread in threads:
            try:
                with open(f"/proc/{pid}/task/{thread}/children") as listing:
                    children = [int(child) for child in listing.read().split()]
            except FileNotFoundError:
                if os.path.exists(f"/proc/{pid}/task/{thread}"):  # no children lists on this kernel
                    return descendants(root, all_processes())
                continue
            except (OSError, ValueError):
                continue
            for child in children:
                if child not in found:
                    found.add(child)
                    todo.append(child)
    return found


class Record:
    """What a successor needs to find an attempt's processes after its shim died: the shim's (pid, start) and
    the (pid, start) of the task's processes seen."""

    def __init__(self, shim: tuple[int, int], members: list[tuple[int, int]] | None = None) -> None:
        self.shim = tuple(shim)
        self.members = [tuple(member) for member in members or ()]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Record) and (self.shim, self.members) == (other.shim, other.members)

    def __repr__(self) -> str:
        return f"Record(shim={self.shim}, members={self.members})"

    def dumps(self) -> str:
        return json.dumps({"shim": list(self.shim), "members": [list(m) for m in self.members]})

    @classmethod
    def loads(cls, text: str) -> Record:
        data = json.loads(text)
        return cls(shim=tuple(data["shim"]), members=data.get("members", []))

    def write(self, path: str | os.PathLike) -> None:
        """Atomically, so a reader never sees half a record."""
        path = os.fspath(path)
        partial = os.path.splitext(path)[0] + ".partial"
        with open(partial, "w") as out:
            out.write(self.dumps())
        os.replace(partial, path)


def kill_all(pids: Iterable[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def cgroup_pids(cgroup: str | os.PathLike) -> list[int]:
    try:
        with open(os.path.join(cgroup, "cgroup.procs")) as procs:
            return [int(pid) for pid in procs.read().split()]
    except (OSError, ValueError):
        return []


def kill_cgroup(cgroup: str | os.PathLike) -> None:
    """SIGKILL every process in the cgroup: at once with cgroup.kill, else one by one (what forks meanwhile is
    caught on the next call)."""
    try:
        with open(os.path.join(cgroup, "cgroup.kill"), "w") as kill:
            kill.write("1")
    except OSError:
        kill_all(cgroup_pids(cgroup))


def remove_cgroup(cgroup: str | os.PathLike) -> None:
    with contextlib.suppress(OSError):
        os.rmdir(cgroup)


def remove_empty_cgroup(cgroup: str | os.PathLike) -> bool:
    """Remove the cgroup unless a process is left in it (the kernel refuses to, EBUSY); whether it is gone. One
    rmdir both asks and removes: reading its cgroup.procs first cost every attempt's end a second look."""
    try:
        os.rmdir(cgroup)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def signal_attempt(leader: int, pids: Iterable[int], sig: int) -> None:
    """`sig` to the task's process group (`leader`'s) at once, as a terminal signals a job, then to each of
    `pids` that left that group. At once matters: a shell that sees its child end before its own signal arrives
    exits without running its trap (the checkpoint a TERM trap writes, say), or, under SIGKILL, exits 137 on its
    own, and a killed attempt reads as exited."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader, sig)
    kill_all((pid for pid in pids if _group_of(pid) != leader), sig)


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def empty_cgroups(cgroups: Iterable[str | os.PathLike], timeout: float = KILL_TIMEOUT) -> list:
    """Kill everything in `cgroups` and remove them; those that still held processes after `timeout`."""
    cgroups = list(cgroups)
    deadline = time.monotonic() + timeout
    while (alive := [cgroup for cgroup in cgroups if cgroup_pids(cgroup)]) and time.monotonic() < deadline:
        for cgroup in alive:
            kill_cgroup(cgroup)
        time.sleep(0.01)
    for cgroup in cgroups:
        remove_cgroup(cgroup)
    return alive
