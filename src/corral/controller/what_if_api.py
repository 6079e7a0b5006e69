"""/api/v1/jobs/{id}/what-if: for a pending job, the smallest changes that would start it sooner, each with its
estimate, forecast on the cluster as it is now (corral.scheduling.remedies)."""

from __future__ import annotations

import asyncio
import time

from fastapi import APIRouter, Depends, HTTPException, Request, status

from corral.controller.identity import allow
from corral.controller.jobs_api import estimate_view
from corral.controller.params import PathId
from corral.controller.services import services_of
from corral.core.estimates import start_text
from corral.core.roles import Action
from corral.core.states import JobState
from corral.core.what_if import RemedyView, WhatIfView
from corral.engine.estimates import stored_estimate
from corral.scheduling.remedies import Remedy, what_if
from corral.store.job_views import job_row

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"],
                   dependencies=[Depends(allow(Action.READ, "job", job_tokens=True))])


@router.get("/{job_id}/what-if", response_model=WhatIfView)
async def job_what_if(job_id: PathId, request: Request) -> WhatIfView:
    """404 for no such job; 409 for a job that is not pending (nothing to start sooner)."""
    services = services_of(request)
    async with services.store.read() as connection:
        job = await job_row(connection, job_id)
    if job is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}")
    if job.state != JobState.PENDING:
        raise HTTPException(status.HTTP_409_CONFLICT,
                            f"job {job_id} is {job.state}, not pending: only a job waiting to start can start sooner")
    async with _one_at_a_time(request):  # each costs seconds of CPU on a long queue: they wait for each other
        return await _what_if(request, job_id)


async def _what_if(request: Request, job_id: int) -> WhatIfView:
    services = services_of(request)
    now = time.time()
    # An estimator of its own: the engine's keeps a capacity index across its passes, which a request reading
    # beside them must not move; the durations are those the engine's learned.
    situation, _, assumed = await services.engine.estimator.beside().situation(services.store, now)
    if not any(item.unit.job_id == job_id for item in situation.waiting):
        raise HTTPException(status.HTTP_409_CONFLICT,
                            f"job {job_id} has no task waiting for room (it may have been placed just now)")
    answer = await asyncio.to_thread(what_if, situation, job_id)  # seconds of simulation at most: off the loop
    baseline = estimate_view(stored_estimate(answer.baseline, assumed, now), now)
    return WhatIfView(job_id=job_id, now=now, baseline=baseline, forecasts=answer.forecasts,
                      remedies=[remedy_view(remedy, now) for remedy in answer.remedies])


def _one_at_a_time(request: Request) -> asyncio.Lock:
    state = request.app.state
    if not hasattr(state, "what_if_lock"):
        state.what_if_lock = asyncio.Lock()
    return state.what_if_lock


def remedy_view(remedy: Remedy, now: float) -> RemedyView:
    start_at = remedy.estimate.start_at
    return RemedyView(kind=remedy.kind, change=remedy.change, spec=remedy.spec, start_at=start_at,
                      text=start_text(start_at, None, None, False, now), workers=list(remedy.workers),
                      preempts=list(remedy.preempts), cancel=remedy.cancel)
