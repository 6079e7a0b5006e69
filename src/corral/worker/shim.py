"""The supervisor of one attempt: `python -m corral.worker.shim RECORD CGROUP -- COMMAND...`.

The worker starts it in a session of its own with a pipe, its lifeline, as stdin. The shim
makes itself a child subreaper, starts COMMAND in a new session (in the cgroup CGROUP, created
here, unless CGROUP is "-"), and from then on every process the task starts is either in
that cgroup or a descendant of the shim, whatever it does with sessions and forks. It keeps
the record at RECORD (see corral.worker.containment) up to date, and:

- on SIGTERM, passes SIGTERM to every process of the attempt (the worker's stop with grace);
- when the lifeline closes, because the worker closed it (the grace period is over) or died
  (even by SIGKILL), kills every process of the attempt;
- when COMMAND exits, kills whatever it left behind.

It returns only once every process of the attempt is gone, then removes the record and the
cgroup and ends as COMMAND ended (the same exit code, or the same signal), so the worker reads
the task's outcome from its own child as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from corral.worker.containment import (
    KILL_TIMEOUT,
    Record,
    all_processes,
    cgroup_pids,
    descendants,
    kill_all,
    kill_cgroup,
    read_stat,
    remove_cgroup,
)

PR_SET_CHILD_SUBREAPER = 36
SCAN = 0.5  # how often the task's processes are listed for the record (where there is no cgroup)


class Shim:
    def __init__(self, record_path: Path, cgroup: Path | None, command: list[str]) -> None:
        self.record_path = record_path
        self.cgroup = cgroup
        self.command = command
        own = read_stat(os.getpid())
        self.record = Record(shim=(os.getpid(), own.start if own else 0), cgroup=str(cgroup) if cgroup else None)
        self.child = 0  # the task's pid, once started
        self.status: int | None = None  # the task's wait status, once it has ended
        self.terminate = False

    def run(self) -> int:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        wakeup_read, wakeup_write = os.pipe()
        os.set_blocking(wakeup_write, False)
        signal.set_wakeup_fd(wakeup_write)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        self._enter_cgroup()
        try:
            try:
                child = self._spawn()
            except subprocess.SubprocessError:  # raised by _join_cgroup: the task could not enter it
                self._no_cgroup(f"the task cannot enter {self.cgroup}")
                child = self._spawn()
        except OSError as error:
            print(f"corral: cannot start {self.command[0]}: {error}", file=sys.stderr)
            self._clean_up()
            return (127 if isinstance(error, FileNotFoundError) else 126) << 8  # as a wait status
        self.child = child.pid
        self._note_members()
        lifeline = True
        next_scan = time.monotonic() + SCAN
        while self.status is None and lifeline:
            readable, _, _ = select.select([0, wakeup_read], [], [], max(0.0, next_scan - time.monotonic()))
            if wakeup_read in readable:
                os.read(wakeup_read, 512)
            if 0 in readable and not os.read(0, 512):
                lifeline = False
            self._reap()
            if self.terminate:
                self.terminate = False
                self._signal_attempt(signal.SIGTERM)
            if time.monotonic() >= next_scan:
                self._note_members()
                next_scan = time.monotonic() + SCAN
        self._kill_attempt()
        self._clean_up()
        if self.status is None:  # the lifeline closed and the task has not been waited for: it is dead now
            self.status = os.waitpid(self.child, 0)[1]
        return self.status

    # the attempt's processes ---------------------------------------------------------------

    def _attempt_pids(self) -> set[int]:
        if self.cgroup is not None:
            return set(cgroup_pids(self.cgroup))
        return descendants(os.getpid(), all_processes())

    def _signal_attempt(self, sig: int) -> None:
        """`sig` to the task's process group at once, as a terminal signals a job, then to every process of the
        attempt that left that group. At once matters: a shell that sees its child end before its own signal
        arrives exits without running its trap (the checkpoint a TERM trap writes, say)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.child, sig)
        kill_all((pid for pid in self._attempt_pids() if _group_of(pid) != self.child), sig)

    def _kill_attempt(self) -> None:
        """SIGKILL everything until nothing is left (a process forking meanwhile is caught on the next round).

        The task's own process group goes first: killed after its children, a shell would see them die and
        exit 137 on its own, and the attempt would read as exited rather than killed."""
        if self.status is None:
            self._signal_attempt(signal.SIGKILL)
        deadline = time.monotonic() + KILL_TIMEOUT
        while (pids := self._attempt_pids()) and time.monotonic() < deadline:
            if self.cgroup is not None:
                kill_cgroup(self.cgroup)
            kill_all(pids)
            time.sleep(0.01)
            self._reap()
        if pids:
            print(f"corral: processes {sorted(pids)} survive SIGKILL after {KILL_TIMEOUT}s", file=sys.stderr)

    def _reap(self) -> None:
        """Wait for every child that ended: the task, and orphans that came to us as the subreaper."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.child:
                self.status = status

    def _note_members(self) -> None:
        """Add the task's processes seen now to the record (rewritten only when it grows)."""
        if self.cgroup is not None and self.record.members:
            return  # the cgroup knows its members; the task's own pid is recorded for a cgroup that is gone
        seen = set(self.record.members)
        processes = all_processes()
        mine = descendants(os.getpid(), processes)
        new = [(stat.pid, stat.start) for stat in processes if stat.pid in mine and (stat.pid, stat.start) not in seen]
        if new or not self.record_path.exists():
            self.record.members.extend(new)
            self.record.write(self.record_path)

    def _on_sigterm(self, *_: object) -> None:
        self.terminate = True

    # the cgroup ------------------------------------------------------------------------------

    def _spawn(self) -> subprocess.Popen:
        return subprocess.Popen(self.command, stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=self._join_cgroup if self.cgroup else None)

    def _enter_cgroup(self) -> None:
        if self.cgroup is None:
            return
        try:
            self.cgroup.mkdir(exist_ok=True)
        except OSError as error:
            self._no_cgroup(str(error))

    def _no_cgroup(self, why: str) -> None:
        print(f"corral: no cgroup for this task ({why}): tracking its processes instead", file=sys.stderr)
        assert self.cgroup is not None
        remove_cgroup(self.cgroup)
        self.cgroup = None
        self.record.cgroup = None

    def _join_cgroup(self) -> None:
        """preexec_fn of the task: it enters its cgroup before it runs anything."""
        assert self.cgroup is not None
        procs = os.open(self.cgroup / "cgroup.procs", os.O_WRONLY)  # never created: it must be a cgroup's
        try:
            os.write(procs, str(os.getpid()).encode())
        finally:
            os.close(procs)

    def _clean_up(self) -> None:
        if self.cgroup is not None:
            remove_cgroup(self.cgroup)
        self.record_path.unlink(missing_ok=True)


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def end_as(status: int) -> None:
    """Exit as a process with wait status `status` did: the same exit code, or killed by the same signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP have no handler to reset
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def main(argv: list[str]) -> None:
    record, cgroup, separator, *command = argv
    if separator != "--" or not command:
        sys.exit("usage: python -m corral.worker.shim RECORD CGROUP|- -- COMMAND...")
    shim = Shim(Path(record), None if cgroup == "-" else Path(cgroup), command)
    end_as(shim.run())


if __name__ == "__main__":
    main(sys.argv[1:])
