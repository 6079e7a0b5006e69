"""The id of the file system this process sees, so that a worker can tell whether it shares a submitter's.

Two processes see the same files when they run on the same machine, since the same boot, and in the
same mount namespace: the id is a hash of the kernel's boot id and the inode of the mount namespace.
Where /proc lacks them (not Linux), it is a hash of the host name and the machine's network address,
which tells machines apart but not containers on one machine.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import uuid
from pathlib import Path

from corral.core.spec_text import FILESYSTEM_ID

# For tests only: a worker started with this variable behaves as if it ran on another machine.
OVERRIDE = "CORRAL_FILESYSTEM_ID"
_PATTERN = re.compile(FILESYSTEM_ID)


def filesystem_id() -> str:
    """A stable hex id (JobSpec's FilesystemId), equal for every process that sees the same files."""
    override = os.environ.get(OVERRIDE)
    if override:
        if not _PATTERN.fullmatch(override):
            raise ValueError(f"{OVERRIDE}={override!r}: not 16 to 64 lowercase hex digits")
        return override
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        identity = f"linux:{boot}:{os.stat('/proc/self/ns/mnt').st_ino}"
    except OSError:
        identity = f"host:{socket.gethostname()}:{uuid.getnode()}"
    return hashlib.sha256(identity.encode()).hexdigest()[:32]
