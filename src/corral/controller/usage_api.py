"""/api/v1/usage: what each project, user or pool used over a window, and its cost at the config's prices; and the
same per day for the dashboard's chart. A caller sees the usage its role lets it read (core.roles: Action.USAGE)."""

from __future__ import annotations

import time
from typing import Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request, status

from corral.controller.identity import allow, principal_of
from corral.controller.services import services_of
from corral.core.roles import Action
from corral.core.usage import DAY, UsageBy, UsageReport, UsageSeries, day_starts, report, series, visibility, window
from corral.store.usage import usage_sums

router = APIRouter(prefix="/api/v1", tags=["usage"], dependencies=[Depends(allow(Action.USAGE))])

MOMENT = "unix seconds, an ISO 8601 time, or how long ago (30d, 12h)"
Since = Query(None, max_length=64, description=f"{MOMENT}; default: 30 days before until")
Until = Query(None, max_length=64, description=f"{MOMENT}; default: now")
By = Query(UsageBy.PROJECT, description="group by project, user (a job's owner) or pool")


def _window(since: str | None, until: str | None, now: float) -> tuple[float, float]:
    try:
        return window(since, until, now)
    except ValueError as error:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(error)) from None


@router.get("/usage", response_model=UsageReport)
async def usage(request: Request, since: str | None = Since, until: str | None = Until,
                by: UsageBy = By) -> UsageReport:
    """Each attempt's reservation times the seconds it held it inside [since, until] (a running one: up to until,
    or now if that is earlier), summed by `by`; totals are the sum of the rows."""
    principal = principal_of(request)
    now = time.time()
    start, end = _window(since, until, now)
    services = services_of(request)
    async with services.store.read() as connection:
        found = await usage_sums(connection, by, [(start, end)], min(end, now), visibility(principal))
    return report(start, end, by, found, services.settings.config.prices)


@router.get("/usage/series", response_model=UsageSeries)
async def usage_series(request: Request, since: str | None = Since, until: str | None = Until, by: UsageBy = By,
                       bucket: Literal["day"] = Query("day", description="the buckets' length")) -> UsageSeries:
    """Usage per day from `since` (the last bucket ends at `until`), one row per key."""
    principal = principal_of(request)
    now = time.time()
    start, end = _window(since, until, now)
    try:
        starts = day_starts(start, end)
    except ValueError as error:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(error)) from None
    services = services_of(request)
    async with services.store.read() as connection:
        found = await usage_sums(connection, by, [(s, min(s + DAY, end)) for s in starts], min(end, now),
                                 visibility(principal))
    return series(start, end, by, starts, found, services.settings.config.prices)
