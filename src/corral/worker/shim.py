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
import sys
import time

from corral.worker.processes import (
    KILL_TIMEOUT,
    Record,
    cgroup_pids,
    descendants_of,
    kill_all,
    kill_cgroup,
    read_stat,
    remove_cgroup,
)

PR_SET_CHILD_SUBREAPER = 36
SCAN = 0.5  # how often the task's processes are listed for the record (where there is no cgroup)


class Shim:
    def __init__(self, record_path: str, cgroup: str | None, command: list[str]) -> None:
        self.record_path = record_path
        self.cgroup = cgroup
        self.command = command
        own = read_stat(os.getpid())
        self.record = Record(shim=(os.getpid(), own.start if own else 0), cgroup=cgroup)
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
                self.child = self._spawn()
            except CgroupRefused:
                self._no_cgroup(f"the task cannot enter {self.cgroup}")
                self.child = self._spawn()
        except OSError as error:
            print(f"corral: cannot start {self.command[0]}: {error}", file=sys.stderr)
            self._clean_up()
            return (127 if isinstance(error, FileNotFoundError) else 126) << 8  # as a wait status
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
        return {pid for pid in descendants_of(os.getpid()) if (stat := read_stat(pid)) and not stat.zombie}

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
        stats = (read_stat(pid) for pid in descendants_of(os.getpid()))
        new = [(stat.pid, stat.start) for stat in stats
               if stat is not None and not stat.zombie and (stat.pid, stat.start) not in seen]
        if new or not os.path.exists(self.record_path):
            self.record.members.extend(new)
            self.record.write(self.record_path)

    def _on_sigterm(self, *_: object) -> None:
        self.terminate = True

    # the cgroup ------------------------------------------------------------------------------

    def _spawn(self) -> int:
        """Start the task in a session of its own (and its cgroup), stdin from /dev/null; its pid.

        By hand rather than with subprocess, whose import alone would be most of a short task's start: the child
        reports a failure to enter the cgroup or to exec through a pipe that a successful exec closes."""
        report_read, report_write = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:  # the child: no Python beyond this, whatever happens
            try:
                os.close(report_read)
                for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # ignored by Python, not by the programs it starts
                    signal.signal(sig, signal.SIG_DFL)
                os.setsid()
                stage = b"c"
                if self.cgroup is not None:
                    self._join_cgroup()
                stage = b"e"
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.execvp(self.command[0], self.command)
            except OSError as error:
                os.write(report_write, stage + str(error.errno).encode())
            finally:
                os._exit(127)
        os.close(report_write)
        with os.fdopen(report_read, "rb") as report:
            failure = report.read()
        if not failure:
            return pid
        os.waitpid(pid, 0)
        if failure[:1] == b"c":
            raise CgroupRefused()
        errno = int(failure[1:])
        raise OSError(errno, os.strerror(errno), self.command[0])

    def _enter_cgroup(self) -> None:
        if self.cgroup is None:
            return
        try:
            os.makedirs(self.cgroup, exist_ok=True)
        except OSError as error:
            self._no_cgroup(str(error))

    def _no_cgroup(self, why: str) -> None:
        print(f"corral: no cgroup for this task ({why}): tracking its processes instead", file=sys.stderr)
        assert self.cgroup is not None
        remove_cgroup(self.cgroup)
        self.cgroup = None
        self.record.cgroup = None

    def _join_cgroup(self) -> None:
        """In the task's process: it enters its cgroup before it runs anything."""
        assert self.cgroup is not None
        procs = os.open(os.path.join(self.cgroup, "cgroup.procs"), os.O_WRONLY)  # never created: a cgroup's
        try:
            os.write(procs, str(os.getpid()).encode())
        finally:
            os.close(procs)

    def _clean_up(self) -> None:
        if self.cgroup is not None:
            remove_cgroup(self.cgroup)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.record_path)


class CgroupRefused(Exception):
    """The task's process could not enter its cgroup."""


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
    shim = Shim(record, None if cgroup == "-" else cgroup, command)
    end_as(shim.run())


if __name__ == "__main__":
    main(sys.argv[1:])
