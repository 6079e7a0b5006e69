"""Start estimates as users read them, and the rules that say when one moved and how right they were.

An estimate is rewritten (and recorded) only when it moves past the noise: half a minute, or a tenth
of the time ahead. It is worth a notification when the wait it promises grows or shrinks by more
than a factor (two by default), or a start becomes unknown or known. Once the job starts, each
recorded estimate's error is the distance between what it said and the start, reported by horizon
(how long before the start it was made).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

NOW_WITHIN = 30.0  # seconds: a start this close is "now"
NOISE = 30.0  # seconds an estimate moves before it is rewritten...
NOISE_SHARE = 0.1  # ...or this share of the time ahead, whichever is more
MOVE_FACTOR = 2.0  # the wait promised grows or shrinks by more than this: worth telling the job's owner
SHORTEST_WAIT = 60.0  # seconds: waits shorter than this count as this long when compared by factor
MOVED_ARROW = "->"
HORIZONS = ((60.0, "under 1 min"), (600.0, "1-10 min"), (3600.0, "10-60 min"), (6 * 3600.0, "1-6 h"),
            (math.inf, "over 6 h"))


@dataclass(frozen=True)
class Settled:
    """An estimate held to account: made at `made_at` for `start_at`; the job started at `started_at`."""

    made_at: float
    start_at: float
    started_at: float

    @property
    def horizon(self) -> float:
        return max(self.started_at - self.made_at, 0.0)

    @property
    def error(self) -> float:
        return abs(self.start_at - self.started_at)


@dataclass(frozen=True)
class Accuracy:
    horizon: str
    count: int
    median_error: float  # seconds
    p90_error: float
    median_relative: float  # error over the wait it estimated (the horizon), median


def horizon_of(seconds: float) -> str:
    return next(name for bound, name in HORIZONS if seconds < bound)


def accuracy(settled: Iterable[Settled]) -> list[Accuracy]:
    """Median and 90th percentile absolute error per horizon, in the horizons' order (those with records only)."""
    by_horizon: dict[str, list[Settled]] = {}
    for record in settled:
        by_horizon.setdefault(horizon_of(record.horizon), []).append(record)
    found = []
    for _, name in HORIZONS:
        records = by_horizon.get(name)
        if not records:
            continue
        errors = sorted(r.error for r in records)
        relative = [r.error / max(r.horizon, 1.0) for r in records]
        found.append(Accuracy(name, len(records), statistics.median(errors), _percentile(errors, 0.9),
                              statistics.median(relative)))
    return found


def moved(old: float | None, new: float | None, now: float) -> bool:
    """Whether a start estimate moved past the noise (a start known or unknown on one side only always did)."""
    if old is None or new is None:
        return (old is None) != (new is None)
    return abs(new - old) > max(NOISE, NOISE_SHARE * max(old - now, 0.0))


def moved_by_factor(old: float | None, new: float | None, now: float, factor: float = MOVE_FACTOR) -> bool:
    """Whether the wait an estimate promises changed by more than `factor` (or became known, or unknown)."""
    if old is None or new is None:
        return (old is None) != (new is None)
    before, after = max(old - now, SHORTEST_WAIT), max(new - now, SHORTEST_WAIT)
    return max(before, after) / min(before, after) > factor


def ahead(seconds: float) -> str:
    """A wait as people say it: "~40s", "~4m", "~1.5h", "~3d"."""
    if seconds < 90:
        return f"~{max(round(seconds), 1)}s"
    if round(seconds / 60) < 60:
        return f"~{round(seconds / 60)}m"
    if seconds < 10 * 3600:
        return f"~{seconds / 3600:.1f}h".replace(".0h", "h")
    if seconds < 48 * 3600:
        return f"~{round(seconds / 3600)}h"
    return f"~{round(seconds / 86400)}d"


def start_text(start_at: float | None, after_job: int | None, unknown: str | None, never: bool, now: float) -> str:
    """The START column: "now", "~4m", "~2h after job 41", "unknown: no worker can ever fit it"."""
    if start_at is None:
        return f"unknown: {unknown}" if unknown else ("unknown: it can never start" if never else "unknown")
    wait = start_at - now
    if wait <= NOW_WITHIN:
        return "now"
    return ahead(wait) + (f" after job {after_job}" if after_job is not None else "")


def moved_message(before: str, after: str) -> str:
    """The history row of a far move (job.estimate_moved), which its webhook reads back with `moved_parts`."""
    return f"start estimate moved: {before} {MOVED_ARROW} {after}"


def moved_parts(message: str | None) -> dict[str, str | None]:
    """The two estimates a `moved_message` names (None where the message is not one)."""
    head, _, rest = (message or "").partition("start estimate moved: ")
    before, arrow, after = rest.partition(f" {MOVED_ARROW} ")
    return {"before": before, "after": after} if arrow and not head else {"before": None, "after": None}


def _percentile(ordered: list[float], share: float) -> float:
    """The nearest-rank percentile of sorted values."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))]
