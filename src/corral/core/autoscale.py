"""How many replicas a loaded deployment should run for its load: a pure decision over load samples.

Load is requests in flight plus requests waiting for the deployment. Scaling up follows the
average over a short window, so a burst is answered quickly; scaling down follows the highest
need seen over the whole scale-down delay (as Knative's stable window), so replicas leave only
once load has stayed low that long. The count stays within [max(MIN, 1), MAX]: scaling to
zero is the idle timeout's business, and a deployment at zero is started by a request.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

SCALE_UP_WINDOW = 3.0  # seconds of load averaged for scaling up


@dataclass(frozen=True)
class Sample:
    at: float
    load: float


@dataclass(frozen=True)
class Bounds:
    min_replicas: int
    max_replicas: int
    target_concurrency: float
    scale_down_delay: float


@dataclass(frozen=True)
class Decision:
    replicas: int
    reason: str


def needed(load: float, target: float) -> int:
    return math.ceil(load / target - 1e-9)


def decide(samples: Sequence[Sample], bounds: Bounds, current: int, now: float) -> Decision | None:
    """The replicas wanted now with why, or None to leave `current` as it is."""
    if current == 0 or not samples:
        return None
    floor, ceiling = max(bounds.min_replicas, 1), bounds.max_replicas
    recent = [s.load for s in samples if now - s.at <= SCALE_UP_WINDOW] or [samples[-1].load]
    average = sum(recent) / len(recent)
    up = min(max(needed(average, bounds.target_concurrency), floor), ceiling)
    if up > current:
        return Decision(up, _reason(average, SCALE_UP_WINDOW, bounds, up))
    stable = [s for s in samples if now - s.at <= bounds.scale_down_delay]
    covered = samples[0].at <= now - bounds.scale_down_delay
    peak = max((s.load for s in stable), default=0.0)
    down = max(min(max(needed(peak, bounds.target_concurrency), floor), ceiling), up)
    if down < current and covered:
        return Decision(down, _reason(peak, bounds.scale_down_delay, bounds, down, peak=True))
    if current < floor:
        return Decision(floor, f"autoscale: at least {floor} replicas")
    return None


def _reason(load: float, window: float, bounds: Bounds, replicas: int, peak: bool = False) -> str:
    what = "peak load" if peak else "load"
    return (f"autoscale: {what} {load:.3g} over {window:g} s, target {bounds.target_concurrency:g} "
            f"→ {replicas} replicas")


def trim(samples: list[Sample], keep: float, now: float) -> None:
    """Forget samples older than `keep` seconds, but one: it shows the window is covered."""
    while len(samples) > 1 and samples[1].at <= now - keep:
        samples.pop(0)
