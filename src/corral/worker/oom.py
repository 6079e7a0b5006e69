"""Whether a task that died by SIGKILL was killed for memory, from the records of the worker's cgroup.

The kernel counts OOM kills per memory cgroup (`oom_kill` in cgroup v2's memory.events and
v1's memory.oom_control) and keeps the peak use against the limit. A task that exits 137
(SIGKILL, whether its own process or a shell under it died) while that counter rose, or,
where the kernel keeps no counter, while the cgroup's peak rose to its limit, was killed
for memory. Tasks share the worker's
cgroup, so a kill of another task at the same moment is indistinguishable: the cause is
a judgement for the retry policy, not a proof.
"""

from __future__ import annotations

import os
import re
import weakref
from dataclasses import dataclass
from pathlib import Path

SIGKILL_EXIT = 137  # 128 + SIGKILL
AT_LIMIT = 0.98  # a peak this close to the limit counts as at the limit
UNLIMITED = 2**62  # cgroup v1 writes "no limit" as a huge page-aligned number


@dataclass(frozen=True)
class MemoryRecord:
    oom_kills: int | None = None
    peak: int | None = None
    limit: int | None = None  # None: no limit


def killed_for_memory(exit_code: int | None, before: MemoryRecord, after: MemoryRecord) -> bool:
    if exit_code != SIGKILL_EXIT:
        return False
    if before.oom_kills is not None and after.oom_kills is not None:
        return after.oom_kills > before.oom_kills
    # No counter (an old kernel): the peak rose to the limit during the attempt.
    return (after.limit is not None and after.peak is not None and after.peak > (before.peak or 0)
            and after.peak >= AT_LIMIT * after.limit)


def parse_counter(text: str, name: str) -> int | None:
    """`name N` from a flat keyed cgroup file (memory.events, memory.oom_control)."""
    match = re.search(rf"^{re.escape(name)}\s+(\d+)\s*$", text, re.MULTILINE)
    return int(match.group(1)) if match else None


def parse_limit(text: str) -> int | None:
    value = text.strip()
    if not value or value == "max":
        return None
    limit = int(value)
    return None if limit >= UNLIMITED else limit


def cgroup_dirs(proc_cgroup: str, root: Path) -> tuple[Path | None, Path | None]:
    """(cgroup v2 directory, cgroup v1 memory directory) of a process, from its /proc/PID/cgroup."""
    v2 = v1 = None
    for line in proc_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:
            v2 = root / path.lstrip("/")
        elif "memory" in controllers.split(","):
            v1 = root / "memory" / path.lstrip("/")
    return v2, v1


class CgroupMemory:
    """Reads the memory records of one cgroup; files it cannot read give None, never an error."""

    def __init__(self, v2_dir: Path | None = None, v1_dir: Path | None = None) -> None:
        self.v2_dir = v2_dir if v2_dir is not None and (v2_dir / "memory.events").exists() else None
        self.v1_dir = v1_dir if v1_dir is not None and (v1_dir / "memory.oom_control").exists() else None
        self._directory = self.v2_dir or self.v1_dir
        self._events_file, self._peak_file, self._limit_file = (
            ("memory.events", "memory.peak", "memory.max") if self.v2_dir is not None else
            ("memory.oom_control", "memory.max_usage_in_bytes", "memory.limit_in_bytes"))
        self._events: int | None = None  # the counter's file, kept open

    @classmethod
    def of_this_process(cls, root: Path = Path("/sys/fs/cgroup")) -> CgroupMemory:
        try:
            return cls(*cgroup_dirs(Path("/proc/self/cgroup").read_text(), root))
        except OSError:
            return cls()

    def read(self) -> MemoryRecord:
        """The OOM kill counter; the peak and the limit only where the kernel keeps no counter (the verdict reads
        them only then): one read at every task's start rather than three."""
        if self._directory is None:
            return MemoryRecord()
        oom_kills = parse_counter(self._read_events(), "oom_kill")
        if oom_kills is not None:
            return MemoryRecord(oom_kills)
        return MemoryRecord(None, _int(_read(self._directory / self._peak_file)),
                            parse_limit(_read(self._directory / self._limit_file)))

    def _read_events(self) -> str:
        """The counter's file, opened once and read from its start each time (the kernel makes a cgroup file's text
        afresh at each read from its start): opening a cgroup file costs forty times reading it."""
        assert self._directory is not None
        try:
            if self._events is None:
                self._events = os.open(self._directory / self._events_file, os.O_RDONLY | os.O_CLOEXEC)
                weakref.finalize(self, os.close, self._events)
            return os.pread(self._events, 4096, 0).decode()
        except (OSError, ValueError):
            return ""


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, ValueError):
        return ""


def _int(text: str) -> int | None:
    return int(text) if text.strip().isdigit() else None
