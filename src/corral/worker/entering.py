"""The small program a task's processes enter their cgroup by, built where the worker finds a C compiler.

A task in a cgroup of its own was started through a shell that moved itself there and exec'd the task's command
(`_launch` in corral.worker.runner): the shell's exec, its loader and its C library's start-up were half of the CPU
a task's own processes took (an array of `true`). `enter.c` does what that shell did, system calls only: no loader,
no library. The worker builds it once per source and machine into its cache (`$XDG_CACHE_HOME/corral`, else
`~/.cache/corral`), tries it, and uses the shell wherever it cannot be built or does not pass its try.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

log = logging.getLogger("corral.worker.entering")
SOURCE = Path(__file__).with_name("enter.c")
FLAGS = ["-Os", "-static", "-nostdlib", "-fno-pie", "-no-pie", "-fno-stack-protector",
         "-fno-asynchronous-unwind-tables", "-fno-builtin", "-fcf-protection=none", "-Wl,--build-id=none", "-s"]
BUILD_TIMEOUT = 60.0
TRY_TIMEOUT = 10.0


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "corral"


def enter_program(cgroup: Path, cache: Path | None = None) -> str | None:
    """The path of the built program, tried by entering `cgroup` (the worker's own) and running the shell's `exit 0`
    through it; None where it cannot be built or fails its try, and tasks then enter their cgroups by the shell."""
    if platform.machine() not in ("x86_64", "aarch64"):
        return None
    try:
        source = SOURCE.read_bytes()
    except OSError:
        return None
    digest = hashlib.sha256(source + b"\0" + " ".join(FLAGS).encode() + platform.machine().encode()).hexdigest()
    try:
        program = (cache or cache_dir()) / f"corral-enter-{digest[:16]}"
        if not os.access(program, os.X_OK):
            _build(program)
        tried = subprocess.run([str(program), str(cgroup), "/bin/sh", "-c", "exit 0"], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=TRY_TIMEOUT)
        if tried.returncode != 0:
            raise OSError(f"its try exited {tried.returncode}: {tried.stderr.decode(errors='replace').strip()}")
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:  # RuntimeError: no home directory
        log.info("tasks enter their cgroups by the shell (%s)", error)
        return None
    log.info("tasks enter their cgroups by %s", program)
    return str(program)


def _build(program: Path) -> None:
    """Compile enter.c to `program`, in a directory open to the worker's user alone, the file put in place whole."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise FileNotFoundError("no C compiler (cc) to build corral-enter")
    program.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    descriptor, temporary = tempfile.mkstemp(prefix=program.name, dir=program.parent)
    os.close(descriptor)
    try:
        built = subprocess.run([compiler, *FLAGS, "-o", temporary, str(SOURCE)], stdin=subprocess.DEVNULL,
                               capture_output=True, timeout=BUILD_TIMEOUT)
        if built.returncode != 0:
            raise OSError(f"{compiler} exited {built.returncode}: {built.stderr.decode(errors='replace').strip()}")
        os.chmod(temporary, 0o755)
        os.replace(temporary, program)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
