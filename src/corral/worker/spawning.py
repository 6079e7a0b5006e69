"""Starts a task's processes and waits for them on the event loop.

A child is waited for through a pidfd on the event loop (a thread where pidfds are missing), without asyncio's
subprocess transport: the worker needs its pid, its exit status and a way to signal it, and the transport's objects
and callbacks cost every start.

A start is the C library's posix_spawn where it can change the child's directory and close every descriptor above
stderr itself (glibc 2.34 and later): what subprocess.Popen does for the worker in a vfork'd child, without Popen's
Python around it (0.89x the worker's CPU a start). Python 3.11's os.posix_spawn offers neither action, so glibc's
is called through ctypes. A start that needs a preexec_fn or descriptors passed on, a program without a directory in
its name (looked up on PATH), or a C library without those actions, is Popen's.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path


class Child:
    """A process the worker started: its pid, its exit status once reaped (`returncode`), and its end to await.
    Only the waiter reaps it, so a signal sent before `returncode` is set cannot reach a recycled pid."""

    def __init__(self, pid: int, popen: subprocess.Popen | None = None) -> None:
        self.pid = pid
        self._popen = popen  # reaped through Popen's wait where Popen started it, so Popen knows it ended
        self.returncode: int | None = None  # as asyncio gives it: the exit code, or -N for a death by signal N
        loop = asyncio.get_running_loop()
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:  # a kernel before 5.3
            self._exited = loop.run_in_executor(None, self._collect)
        else:
            self._exited = loop.create_future()
            loop.add_reader(pidfd, self._reap, loop, pidfd)

    def _reap(self, loop: asyncio.AbstractEventLoop, pidfd: int) -> None:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        self._exited.set_result(self._collect())

    def _collect(self) -> int:
        """Reap it, waiting for its end if it has not come yet."""
        if self._popen is not None:
            self.returncode = self._popen.wait()
        else:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)

    def send_signal(self, sig: int) -> None:
        """Raises ProcessLookupError once the process has been reaped, as asyncio's does."""
        if self.returncode is not None:
            raise ProcessLookupError(self.pid)
        os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


_ENCODING, _ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()  # os.fsencode's
# glibc's <spawn.h>: the flags of posix_spawnattr_setflags the start sets.
_SETSIGDEF, _SETSID = 0x04, 0x80
_FIRST_REALTIME = 32  # the kernel's; glibc keeps those below signal.SIGRTMIN for itself
# Room for a posix_spawn_file_actions_t (80 bytes on 64-bit glibc), a posix_spawnattr_t (336) or a sigset_t (128).
_OPAQUE = 1024


class _GlibcSpawn:
    """posix_spawn as Popen(cwd=, close_fds=True, start_new_session=True, restore_signals=True) starts a program
    given by its path: the child changes to its directory, keeps stdin, stdout and stderr (each a descriptor, or
    subprocess.DEVNULL) and closes every other, starts a session of its own, and has every signal at its default
    but those the worker ignores, SIGPIPE and SIGXFSZ (which Python ignores) at theirs too."""

    def __init__(self, libc: ctypes.CDLL) -> None:
        self._libc = libc
        self._attributes = ctypes.create_string_buffer(_OPAQUE)  # the same for every start: made once
        # Popen's child has them at their defaults once it execs; glibc's spawn would leave its own (the real-time
        # signals below SIGRTMIN, which its sigaddset refuses) ignored in the program: their bits are set here.
        bits = ctypes.sizeof(ctypes.c_ulong) * 8
        defaults = (ctypes.c_ulong * (_OPAQUE // ctypes.sizeof(ctypes.c_ulong)))()
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, *range(_FIRST_REALTIME, signal.SIGRTMIN)):
            defaults[(sig - 1) // bits] |= 1 << (sig - 1) % bits
        if (libc.posix_spawnattr_init(self._attributes)
                or libc.posix_spawnattr_setsigdefault(self._attributes, defaults)
                or libc.posix_spawnattr_setflags(self._attributes, ctypes.c_short(_SETSIGDEF | _SETSID))):
            raise OSError("posix_spawnattr_t could not be set")

    def __call__(self, argv: Sequence[str], cwd: Path, env: dict[str, str], stdin: int, stdout: int,
                 stderr: int) -> int:
        """The child's pid; the OSError Popen would raise where the directory or the program cannot be used."""
        names = "\0".join(env)  # as Popen refuses a name that holds "=" once encoded (a surrogate's escape too)
        if "=" in names or "\udc3d" in names:
            raise ValueError("illegal environment variable name")
        entries = [f"{name}={value}".encode(_ENCODING, _ERRORS) for name, value in env.items()]
        arguments = [argument.encode(_ENCODING, _ERRORS) for argument in argv]
        directory = os.fsencode(cwd)
        if b"\0" in b"".join((*entries, *arguments, directory)):  # a C string would end there
            raise ValueError("embedded null byte")
        libc, actions, pid = self._libc, ctypes.create_string_buffer(_OPAQUE), ctypes.c_int()
        libc.posix_spawn_file_actions_init(actions)
        try:
            error = max(libc.posix_spawn_file_actions_addopen(actions, target, b"/dev/null", os.O_RDWR, 0)
                        if fd == subprocess.DEVNULL else libc.posix_spawn_file_actions_adddup2(actions, fd, target)
                        for target, fd in enumerate((stdin, stdout, stderr)))
            error = error or libc.posix_spawn_file_actions_addclosefrom_np(actions, 3) \
                or libc.posix_spawn_file_actions_addchdir_np(actions, directory)
            if error:  # no memory for the actions
                raise OSError(error, os.strerror(error))
            error = libc.posix_spawn(ctypes.byref(pid), arguments[0], actions, self._attributes,
                                     (ctypes.c_char_p * (len(arguments) + 1))(*arguments),
                                     (ctypes.c_char_p * (len(entries) + 1))(*entries))
        finally:
            libc.posix_spawn_file_actions_destroy(actions)
        if error:  # named as Popen names it: the directory if it is what cannot be entered, else the program
            usable = os.path.isdir(cwd) and os.access(cwd, os.X_OK)
            raise OSError(error, os.strerror(error), argv[0] if usable else cwd)
        return pid.value


def _glibc_spawn() -> _GlibcSpawn | None:
    """The C library's posix_spawn with the actions a start needs; None where it lacks them."""
    libc = ctypes.CDLL(None)
    needed = ("posix_spawn_file_actions_addclosefrom_np", "posix_spawn_file_actions_addchdir_np")
    if not all(hasattr(libc, name) for name in needed):
        return None
    return _GlibcSpawn(libc)


_SPAWN = _glibc_spawn()


def spawn(argv: Sequence[str], cwd: Path, env: dict[str, str], stdin: int, stdout: int, stderr: int, *,
          pass_fds: Sequence[int] = (), preexec_fn: Callable[[], None] | None = None) -> Child:
    """Start `argv` in a session of its own, from the event loop. A preexec_fn makes the start a fork rather than a
    vfork: only an interactive task's terminal needs one."""
    ends = (stdin, stdout, stderr)
    if _SPAWN is not None and not pass_fds and preexec_fn is None and os.sep in argv[0] \
            and all(fd > 2 or fd == subprocess.DEVNULL for fd in ends):
        return Child(_SPAWN(argv, cwd, env, *ends))
    popen = subprocess.Popen(argv, cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr,
                             start_new_session=True, pass_fds=pass_fds, preexec_fn=preexec_fn)
    return Child(popen.pid, popen)
