"""/api/v1/stats/estimates: how right the start estimates were, by how far ahead they were made."""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends, Query, Request

from corral.controller.identity import allow
from corral.controller.services import services_of
from corral.core.estimates import accuracy
from corral.core.roles import Action
from corral.core.views import EstimateAccuracy, EstimateStats
from corral.store.estimates import settled_since

router = APIRouter(prefix="/api/v1/stats", tags=["stats"])


@router.get("/estimates", response_model=EstimateStats, dependencies=[Depends(allow(Action.READ))])
async def estimate_stats(request: Request, days: float = Query(30.0, gt=0, le=365,
                                                                description="over the jobs started in these days")
                         ) -> EstimateStats:
    """Median and 90th percentile absolute error of the start estimates of jobs started lately, per horizon."""
    async with services_of(request).store.read() as connection:
        settled = await settled_since(connection, time.time() - days * 86400)
    found = accuracy(settled)
    return EstimateStats(days=days, count=len(settled), horizons=[
        EstimateAccuracy(horizon=a.horizon, count=a.count, median_error=a.median_error, p90_error=a.p90_error,
                         median_relative=a.median_relative) for a in found])
