"""Child processes that do not outlive the process that started them (Linux: PR_SET_PDEATHSIG)."""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
_PRCTL = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)  # looked up before fork, not in the child


def dies_with_parent(sig: signal.Signals = signal.SIGTERM) -> Callable[[], None]:
    """A preexec_fn: the child gets `sig` when the thread that started it dies, even if that happened mid-fork.

    Where prctl is missing (not Linux) it does nothing: `corral down` still stops what is left.
    """
    parent = os.getpid()

    def preexec() -> None:
        if _PRCTL is not None:
            _PRCTL(PR_SET_PDEATHSIG, int(sig))
        if os.getppid() != parent:
            os._exit(1)

    return preexec
