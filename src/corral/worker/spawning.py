"""Starts a task's processes and waits for them on the event loop.

A child is waited for through a pidfd on the event loop (a thread where pidfds are missing), without asyncio's
subprocess transport: the worker needs its pid, its exit status and a way to signal it, and the transport's objects
and callbacks cost every start.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path


class Child:
    """A process the worker started: its pid, its exit status once reaped (`returncode`), and its end to await.
    Only the waiter reaps it, so a signal sent before `returncode` is set cannot reach a recycled pid."""

    def __init__(self, popen: subprocess.Popen) -> None:
        self._popen = popen
        self.pid = popen.pid
        loop = asyncio.get_running_loop()
        try:
            pidfd = os.pidfd_open(self.pid)
        except OSError:  # a kernel before 5.3
            self._exited = loop.run_in_executor(None, popen.wait)
        else:
            self._exited = loop.create_future()
            loop.add_reader(pidfd, self._reap, loop, pidfd)

    def _reap(self, loop: asyncio.AbstractEventLoop, pidfd: int) -> None:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        self._exited.set_result(self._popen.wait())

    @property
    def returncode(self) -> int | None:
        """As asyncio gives it: the exit code, or -N for a death by signal N; None until reaped."""
        return self._popen.returncode

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)

    def send_signal(self, sig: int) -> None:
        """Raises ProcessLookupError once the process has been reaped, as asyncio's does."""
        if self._popen.returncode is not None:
            raise ProcessLookupError(self.pid)
        os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def spawn(argv: Sequence[str], cwd: Path, env: dict[str, str], stdin: int, stdout: int, stderr: int, *,
          pass_fds: Sequence[int] = (), preexec_fn: Callable[[], None] | None = None) -> Child:
    """Start `argv` in a session of its own, from the event loop. A preexec_fn makes the start a fork rather than a
    vfork: only an interactive task's terminal needs one."""
    return Child(subprocess.Popen(argv, cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr,
                                  start_new_session=True, pass_fds=pass_fds, preexec_fn=preexec_fn))
