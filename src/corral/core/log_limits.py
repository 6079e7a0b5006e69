"""How much of a task's output is kept, and for how long: a cap per stream per attempt, marked where the
output was cut, and what retention removes (pure decisions; the files are the caller's)."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from corral.core.spec_text import format_bytes

DEFAULT_LOG_LIMIT = 100 * 10**6  # bytes per stream per attempt (100M, as `--log-limit` reads it)


def truncation_marker(limit: int) -> bytes:
    """The line after the last kept byte; on its own line even when the cut falls mid-line."""
    return f"\n[corral: log truncated at {format_bytes(limit)}; further output dropped]\n".encode()


def prune_interval(retention: float) -> float:
    """How often retention looks: files outlive it by a tenth of it at most; hourly at most, each second at least."""
    return min(max(retention / 10, 1.0), 3600.0)


def logs_to_prune(on_disk: Mapping[int, float], finished: Mapping[int, float | None], now: float,
                  retention: float) -> list[int]:
    """Task ids whose logs go: their job finished longer than `retention` ago.

    `on_disk`: each task's log directory with its last change; `finished`: each task's job's end
    (None: not ended). A task the store does not know goes once its directory is that old.
    """
    horizon = now - retention

    def ended(task: int) -> float | None:
        return finished[task] if task in finished else on_disk[task]

    return sorted(task for task in on_disk if (end := ended(task)) is not None and end < horizon)


def attempts_to_prune(on_disk: Mapping[str, float], live: Collection[str], now: float,
                      retention: float) -> list[str]:
    """Attempt directories that go: not live, and unchanged for longer than `retention`.

    `on_disk`: each directory's last change (its newest entry's), which for an ended attempt is its end.
    """
    horizon = now - retention
    return sorted(name for name, changed in on_disk.items() if name not in live and changed < horizon)
