"""Replicas that keep failing to start are replaced ever more slowly: a restart backoff.

A replica that ends before it ever served (its process exited, it failed to start, or it was
evicted unhealthy while still loading) is a failed start. After n failed starts in a row, the
deployment creates its next replica no sooner than FIRST_DELAY * 2 ** (n - 1) seconds after the
last one ended, at most MAX_DELAY; the first replica to turn HEALTHY resets the count. A broken
command then costs a job every few minutes rather than hundreds a minute, while a replica that
served and then died is replaced at once.
"""

from __future__ import annotations

FIRST_DELAY = 1.0
MAX_DELAY = 300.0


def replacement_delay(failed_starts: int) -> float:
    """Seconds from the last failed start to the next replica's creation."""
    if failed_starts <= 0:
        return 0.0
    return min(FIRST_DELAY * 2.0 ** min(failed_starts - 1, 32), MAX_DELAY)
