"""What an attempt's processes are, so that none outlives the attempt: a cgroup, or recorded ids.

This is the worker's side (docs/processes.md). Where a cgroup v2 hierarchy is writable, each
attempt runs in a cgroup of its own, named from the work directory (cgroup_prefix), which no
process can leave; a worker starting up finds its predecessor's by name. Elsewhere each attempt
runs under a shim that is its subreaper and writes a small record in the attempt's directory
(its own pid and start time, and the task's processes it has seen, each with its start time),
so that a successor on the same work directory can kill what a shim that died outright left
behind. A pid counts only with its recorded start time, so a recycled pid is never killed; a
recorded process that is still alive vouches for its whole session (a session id is not reused
while any process is in it), which catches the children a setsid'd process started after the
last record. The primitives the shim needs live in corral.worker.processes.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path

from corral.worker.oom import cgroup_dirs
from corral.worker.processes import (
    KILL_TIMEOUT,
    RECORD,
    ProcStat,
    Record,
    all_processes,
    cgroup_pids,
    descendants,
    kill_all,
)
from corral.worker.warden import sweep

log = logging.getLogger("corral.worker.containment")
POLL = 0.02


def leftovers(record: Record, processes: Iterable[ProcStat]) -> set[int]:
    """The pids of `processes` that belong to the recorded attempt: its shim and recorded members (same pid and
    start time), every process in the session of a recorded member still alive, and their descendants."""
    processes = list(processes)
    known = {record.shim, *record.members}
    ours = {stat.pid for stat in processes if (stat.pid, stat.start) in known}
    sessions = {stat.sid for stat in processes if stat.pid in ours and (stat.pid, stat.start) != record.shim}
    ours |= {stat.pid for stat in processes if stat.sid in sessions}
    for pid in list(ours):
        ours |= descendants(pid, processes)
    return ours


# cgroups -------------------------------------------------------------------------------

def cgroup2_mount(mountinfo: str) -> Path | None:
    """Where the cgroup v2 hierarchy is mounted, from /proc/self/mountinfo (None: not mounted)."""
    for line in mountinfo.splitlines():
        before, _, after = line.partition(" - ")
        if after.split()[:1] == ["cgroup2"]:
            return Path(before.split()[4])
    return None


def cgroup_parent(mode: str = "auto") -> Path | None:
    """The writable cgroup (the worker's own) under which each attempt gets a cgroup; None where there is none
    (mode "processes", no cgroup v2, or no permission). Mode "cgroup" insists on one."""
    if mode == "processes":
        return None
    try:
        mount = cgroup2_mount(Path("/proc/self/mountinfo").read_text())
        parent = cgroup_dirs(Path("/proc/self/cgroup").read_text(), mount)[0] if mount else None
        if parent is None:
            raise OSError("no cgroup v2 hierarchy is mounted")
        if not (os.access(parent, os.W_OK) and os.access(parent / "cgroup.procs", os.W_OK)):
            raise PermissionError(f"{parent} is not writable")
    except OSError as error:
        if mode == "cgroup":
            raise
        log.info("no cgroup for tasks (%s): their processes are tracked by a subreaper and recorded ids", error)
        return None
    log.info("tasks run in cgroups under %s", parent)
    return parent


def cgroup_prefix(work_dir: Path) -> str:
    """What the cgroups of a work directory's attempts are named from, so that workers beside each other differ."""
    return f"corral-{hashlib.sha256(str(work_dir.resolve()).encode()).hexdigest()[:12]}-"


def attempt_cgroup(parent: Path, prefix: str, task_id: int, attempt: int) -> str:
    """The cgroup of one attempt, of the work directory whose cgroup_prefix is `prefix`: a plain string, which every
    start makes and a Path would cost microseconds to."""
    return os.path.join(parent, f"{prefix}{task_id}-{attempt}")


# a successor's sweep ---------------------------------------------------------------------

def reap_record(path: Path, timeout: float = KILL_TIMEOUT) -> int:
    """Kill what the record at `path` names and is still alive, then delete the record; the number killed.

    A record that is not the worker's own (a task run as its owner may replace the files of its directory) names
    nothing: it is ignored, so a task cannot have the worker kill processes of its choosing."""
    try:
        if path.lstat().st_uid != os.geteuid():
            log.warning("process record %s is not this worker's: ignored", path)
            return 0
        record = Record.loads(path.read_text())
    except FileNotFoundError:
        return 0
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.warning("unreadable process record %s (%s): ignored", path, error)
        path.unlink(missing_ok=True)
        return 0
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        pids = leftovers(record, all_processes())
        if not pids:
            break
        if time.monotonic() > deadline:
            log.error("processes %s of %s survive SIGKILL after %ss", sorted(pids), path.parent, timeout)
            return len(killed)
        killed |= pids
        kill_all(pids)
        time.sleep(POLL)
    path.unlink(missing_ok=True)
    return len(killed)


def reap_leftovers(work_dir: Path, cgroups: Path | None = None) -> int:
    """Kill whatever the attempts of a previous worker on `work_dir` left running: what their records name, and
    what is in their cgroups under `cgroups`; the number of processes killed (of the records: a cgroup's are
    counted as cgroups)."""
    records = [*work_dir.glob(f"tasks/*/{RECORD}"), *work_dir.glob(f"tasks/*/execs/*/{RECORD}")]  # and its execs'
    killed = sum(reap_record(path) for path in sorted(records))
    if killed:
        log.warning("killed %d process(es) a previous worker on %s left behind", killed, work_dir)
    if cgroups is not None:
        prefix, held = cgroup_prefix(work_dir), []
        with contextlib.suppress(OSError):
            held = [name for name in os.listdir(cgroups) if name.startswith(prefix) and cgroup_pids(cgroups / name)]
        if held:
            log.warning("killed what a previous worker on %s left in cgroups %s", work_dir, held)
        stuck = sweep(cgroups, prefix)
        if stuck:
            log.error("cgroups %s still hold processes after SIGKILL", stuck)
    return killed
