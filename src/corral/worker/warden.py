"""The warden of a worker whose tasks run in cgroups: `warden PARENT PREFIX WORK_DIR`, stdin a lifeline.

Where cgroups are writable, a task runs in a cgroup of its own, started by the worker directly
(no per-task supervisor to pay for at every start). What a task starts can never leave its
cgroup, so the worker ends an attempt with `cgroup.kill`; what would be left if the worker
itself died outright is this process's work: one per worker, in a session of its own, it
waits on a pipe the worker holds, and when that pipe closes (the worker exited, or was killed
even by SIGKILL) it kills every cgroup named PREFIX... under PARENT and removes them.

Like the shim, it is loaded with corral's packages as bare namespaces and imports only
corral.worker.processes.
"""

from __future__ import annotations

import os
import sys

from corral.worker.processes import empty_cgroups


def sweep(parent: str | os.PathLike, prefix: str) -> list:
    """Kill and remove every cgroup under `parent` whose name starts with `prefix`; those that would not empty."""
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    return empty_cgroups(os.path.join(parent, name) for name in names if name.startswith(prefix))


def main(argv: list[str]) -> None:
    parent, prefix, work_dir = argv
    while os.read(0, 512):  # the worker never writes: this returns only when the pipe closes
        pass
    stuck = sweep(parent, prefix)
    if stuck:
        print(f"corral warden of {work_dir}: cgroups {stuck} did not empty after SIGKILL", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
