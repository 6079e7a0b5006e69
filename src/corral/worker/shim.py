"""The supervisor of one attempt where there is no cgroup:
`shim RECORD [--user UID:GID:GROUPS] [--tty | --stdin FD] -- COMMAND...`.

The worker starts it in a session of its own with a pipe, its lifeline, as stdin. The shim
makes itself a child subreaper and starts COMMAND in a new session; from then on every process
the task starts is a descendant of the shim, whatever it does with sessions and forks. It
keeps the record at RECORD (see corral.worker.containment) up to date, and:

- on SIGTERM, passes SIGTERM to every process of the attempt (the worker's stop with grace);
- when the lifeline closes, because the worker closed it (the grace period is over) or died
  (even by SIGKILL), kills every process of the attempt;
- when COMMAND exits, kills whatever it left behind.

COMMAND's stdin is /dev/null; with `--stdin FD`, the descriptor FD it inherits (an `exec`'s input); with `--tty`,
the terminal it inherits as stdout, which becomes its controlling terminal (an interactive attempt's PTY, whose
job control, Ctrl-C and window size then work as in a terminal of its own). With `--user`, COMMAND runs with that
uid, primary gid and supplementary groups (a comma-separated list): a root worker's task run as its owner, while
the shim stays root, out of the reach of the task's signals, and keeps every process of the task within its own.

It returns only once every process of the attempt is gone, then removes the record and ends
as COMMAND ended (the same exit code, or the same signal), so the worker reads the task's
outcome from its own child. Where cgroups are writable the worker needs no shim: a task's
cgroup holds its processes, and the worker's warden (corral.worker.warden) outlives it.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import select
import signal
import sys
import termios
import time

from corral.worker.processes import (
    KILL_TIMEOUT,
    Record,
    descendants_of,
    kill_all,
    read_stat,
    signal_attempt,
)

PR_SET_CHILD_SUBREAPER = 36
SCAN = 0.5  # how often the task's processes are listed for the record


class Shim:
    def __init__(self, record_path: str, command: list[str], stdin: int | None = None, tty: bool = False,
                 user: tuple[int, int, list[int]] | None = None) -> None:
        self.record_path = record_path
        self.user = user  # (uid, gid, groups) the task runs as, if not the shim's
        self.command = command
        self.stdin = stdin  # the descriptor the task reads, when not /dev/null
        self.tty = tty  # the task takes its stdout, a terminal, as its controlling terminal and its stdin
        own = read_stat(os.getpid())
        self.record = Record(shim=(os.getpid(), own.start if own else 0))
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
        try:
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
        return {pid for pid in descendants_of(os.getpid()) if (stat := read_stat(pid)) and not stat.zombie}

    def _signal_attempt(self, sig: int) -> None:
        signal_attempt(self.child, self._attempt_pids(), sig)

    def _kill_attempt(self) -> None:
        """SIGKILL everything until nothing is left (a process forking meanwhile is caught on the next round).

        The task's own process group goes first (see signal_attempt)."""
        if self.status is None:
            self._signal_attempt(signal.SIGKILL)
        deadline = time.monotonic() + KILL_TIMEOUT
        while (pids := self._attempt_pids()) and time.monotonic() < deadline:
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
        seen = set(self.record.members)
        stats = (read_stat(pid) for pid in descendants_of(os.getpid()))
        new = [(stat.pid, stat.start) for stat in stats
               if stat is not None and not stat.zombie and (stat.pid, stat.start) not in seen]
        if new or not os.path.exists(self.record_path):
            self.record.members.extend(new)
            self.record.write(self.record_path)

    def _on_sigterm(self, *_: object) -> None:
        self.terminate = True

    # starting the task ---------------------------------------------------------------------

    def _spawn(self) -> int:
        """Start the task in a session of its own, stdin from /dev/null, its --stdin or its terminal; its pid.

        By hand rather than with subprocess, whose import alone would be most of a short task's start: the child
        reports a failure to exec through a pipe that a successful exec closes."""
        report_read, report_write = os.pipe2(os.O_CLOEXEC)
        if self.user is not None:  # execvp's lookup imports a module: here, where the user may not read Python's own
            os.get_exec_path()
        pid = os.fork()
        if pid == 0:  # the child: no Python beyond this, whatever happens
            try:
                os.close(report_read)
                for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # ignored by Python, not by the programs it starts
                    signal.signal(sig, signal.SIG_DFL)
                os.setsid()
                if self.tty:
                    fcntl.ioctl(1, termios.TIOCSCTTY, 0)
                    os.dup2(1, 0)
                else:
                    os.dup2(os.open(os.devnull, os.O_RDONLY) if self.stdin is None else self.stdin, 0)
                if self.user is not None:
                    uid, gid, groups = self.user
                    os.setgroups(groups)
                    os.setgid(gid)
                    os.setuid(uid)
                os.execvp(self.command[0], self.command)
            except OSError as error:
                os.write(report_write, str(error.errno).encode())
            finally:
                os._exit(127)
        os.close(report_write)
        if self.stdin is not None:  # the task's alone: its writer sees a broken pipe once the task is gone
            os.close(self.stdin)
        with os.fdopen(report_read, "rb") as report:
            failure = report.read()
        if not failure:
            return pid
        os.waitpid(pid, 0)
        errno = int(failure)
        raise OSError(errno, os.strerror(errno), self.command[0])

    def _clean_up(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.record_path)


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


def _credentials(text: str) -> tuple[int, int, list[int]]:
    """UID:GID:GROUPS (GROUPS comma-separated, maybe empty) as numbers."""
    try:
        uid, gid, groups = text.split(":")
        return int(uid), int(gid), [int(group) for group in groups.split(",") if group]
    except ValueError:
        sys.exit(f"shim: --user takes UID:GID:GROUPS, not {text!r}")


def main(argv: list[str]) -> None:
    record, *rest = argv
    stdin, tty, user = None, False, None
    if rest[:1] == ["--user"] and rest[1:2]:
        user, rest = _credentials(rest[1]), rest[2:]
    if rest[:1] == ["--tty"]:
        tty, rest = True, rest[1:]
    elif rest[:1] == ["--stdin"] and rest[1:2] and rest[1].isdigit():
        stdin, rest = int(rest[1]), rest[2:]
    separator, *command = rest or [""]
    if separator != "--" or not command:
        sys.exit("usage: shim RECORD [--user UID:GID:GROUPS] [--tty | --stdin FD] -- COMMAND...")
    shim = Shim(record, command, stdin, tty, user)
    end_as(shim.run())


if __name__ == "__main__":
    main(sys.argv[1:])
