"""Usage accounting: what attempts held (cores, bytes of memory, GPU devices, a share as its share) times how long
they held it, summed over a window and grouped by project, user or pool; and what that costs at a pool's prices.

The store sums usage per (group, pool) in one query; `report` turns those sums into rows with their cost (prices
are per pool, so a project's row adds the cost of each pool it used) and totals that are the sum of the rows.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from corral.core.config import PoolPrices
from corral.core.roles import RULES, Action, Principal, Scope
from corral.core.spec import parse_moment
from corral.core.wire import WireModel

HOUR = 3600.0
GIB = 2**30
DAY = 86400.0
MAX_BUCKETS = 400  # daily buckets a series may have: a bit over a year


class UsageBy(StrEnum):
    PROJECT = "project"
    USER = "user"
    POOL = "pool"


@dataclass(frozen=True)
class UsageSums:
    """One group's usage in one pool (and, for a series, one bucket), as the store sums it."""

    key: str
    pool: str
    attempts: int
    cpu_seconds: float
    memory_byte_seconds: float
    gpu_seconds: float
    bucket: int = 0


class UsageTotals(WireModel):
    attempts: int = 0
    cpu_seconds: float = 0.0
    memory_byte_seconds: float = 0.0
    gpu_seconds: float = 0.0
    cost: float | None = None  # None: no prices configured


class UsageRow(UsageTotals):
    key: str


class UsageReport(WireModel):
    since: float
    until: float
    by: UsageBy
    rows: list[UsageRow]
    totals: UsageTotals
    currency: str | None = None


class UsageSeriesRow(WireModel):
    key: str
    cpu_seconds: list[float]
    memory_byte_seconds: list[float]
    gpu_seconds: list[float]
    cost: list[float] | None = None


class UsageSeries(WireModel):
    """Usage per bucket: `starts` are the buckets' starts; each row's lists hold one value per bucket."""

    since: float
    until: float
    by: UsageBy
    bucket: str
    starts: list[float]
    rows: list[UsageSeriesRow]
    currency: str | None = None


@dataclass(frozen=True)
class Visibility:
    """Whose usage a caller may read: all of `projects`' usage, and its own (`owner`'s) in `own_projects`."""

    projects: frozenset[str]
    own_projects: frozenset[str]
    owner: str


def visibility(principal: Principal) -> Visibility | None:
    """What `principal` may read of usage, from RULES' USAGE column; None: everything (a cluster admin)."""
    if principal.cluster_admin:
        return None
    scopes = {project: RULES[role].get(Action.USAGE) for project, role in principal.projects.items()}
    return Visibility(projects=frozenset(p for p, scope in scopes.items() if scope is Scope.ANY),
                      own_projects=frozenset(p for p, scope in scopes.items() if scope is Scope.OWN),
                      owner=principal.name)


def window(since: str | None, until: str | None, now: float | None = None) -> tuple[float, float]:
    """The window [since, until] asked for: until defaults to now, since to 30 days before until; ValueError when
    either cannot be read or since is not before until."""
    now = time.time() if now is None else now
    end = parse_moment(until, now) if until else now
    start = parse_moment(since, now) if since else end - 30 * DAY
    if not math.isfinite(start) or not math.isfinite(end) or not end - start < math.inf:
        raise ValueError("since and until must be finite times, less than the largest number apart")
    if not start < end:
        raise ValueError(f"since ({start}) must be before until ({end})")
    return start, end


def day_starts(since: float, until: float) -> list[float]:
    """The starts of the daily buckets covering [since, until]: the first at `since`, every DAY after."""
    if (until - since) / DAY > MAX_BUCKETS:
        raise ValueError(f"a series has at most {MAX_BUCKETS} daily buckets; this window needs "
                         f"{(until - since) / DAY:.0f}")
    count = math.ceil((until - since) / DAY)
    return [since + i * DAY for i in range(count)]


def cost(sums: UsageSums | UsageTotals, prices: PoolPrices | None) -> float:
    if prices is None:
        return 0.0
    return (sums.cpu_seconds * prices.cpu_hour + sums.gpu_seconds * prices.gpu_hour
            + sums.memory_byte_seconds / GIB * prices.memory_gb_hour) / HOUR


def currency_of(prices: Mapping[str, PoolPrices]) -> str | None:
    return next(iter(prices.values())).currency if prices else None


def report(since: float, until: float, by: UsageBy, sums: Iterable[UsageSums],
           prices: Mapping[str, PoolPrices]) -> UsageReport:
    """Rows by key (sorted), each the sum of its pools' sums and their cost; totals are the sum of the rows."""
    rows: dict[str, UsageRow] = {}
    for part in sums:
        row = rows.setdefault(part.key, UsageRow(key=part.key, cost=0.0 if prices else None))
        _add(row, part, cost(part, prices.get(part.pool)) if prices else None)
    ordered = [rows[key] for key in sorted(rows)]
    totals = UsageTotals(cost=0.0 if prices else None)
    for row in ordered:
        _add(totals, row, row.cost)
    return UsageReport(since=since, until=until, by=by, rows=ordered, totals=totals, currency=currency_of(prices))


def series(since: float, until: float, by: UsageBy, starts: list[float], sums: Iterable[UsageSums],
           prices: Mapping[str, PoolPrices]) -> UsageSeries:
    """One row per key with a value per bucket (0 where it used nothing), sorted by key."""
    rows: dict[str, UsageSeriesRow] = {}
    for part in sums:
        row = rows.get(part.key)
        if row is None:
            zeros = [0.0] * len(starts)
            row = rows[part.key] = UsageSeriesRow(key=part.key, cpu_seconds=list(zeros),
                                                  memory_byte_seconds=list(zeros), gpu_seconds=list(zeros),
                                                  cost=list(zeros) if prices else None)
        row.cpu_seconds[part.bucket] += part.cpu_seconds
        row.memory_byte_seconds[part.bucket] += part.memory_byte_seconds
        row.gpu_seconds[part.bucket] += part.gpu_seconds
        if row.cost is not None:
            row.cost[part.bucket] += cost(part, prices.get(part.pool))
    return UsageSeries(since=since, until=until, by=by, bucket="day", starts=starts,
                       rows=[rows[key] for key in sorted(rows)], currency=currency_of(prices))


def _add(into: UsageTotals, part: UsageSums | UsageTotals, part_cost: float | None) -> None:
    into.attempts += part.attempts
    into.cpu_seconds += part.cpu_seconds
    into.memory_byte_seconds += part.memory_byte_seconds
    into.gpu_seconds += part.gpu_seconds
    if into.cost is not None and part_cost is not None:
        into.cost += part_cost
