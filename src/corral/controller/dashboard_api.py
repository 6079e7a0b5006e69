"""What the dashboard reads beyond jobs and workers: the overview with its charts, and the queue."""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel

from corral.controller.identity import allow, principal_of, visible_projects
from corral.controller.jobs_api import job_views
from corral.controller.overview import ClusterSummary, summarize
from corral.controller.samples import Sample
from corral.controller.services import services_of
from corral.core.roles import Action
from corral.core.views import JobView
from corral.store.job_views import queue_page

router = APIRouter(prefix="/api/v1", tags=["dashboard"], dependencies=[Depends(allow(Action.READ))])

class Overview(BaseModel):
    summary: ClusterSummary
    samples: list[Sample]


class QueueEntry(BaseModel):
    position: int  # 1 is considered first
    waiting_tasks: int
    job: JobView


class QueuePage(BaseModel):
    items: list[QueueEntry]
    total: int


@router.get("/overview", response_model=Overview)
async def overview(request: Request) -> Overview:
    services = services_of(request)
    async with services.store.read() as connection:
        summary = await summarize(connection, time.time())
    return Overview(summary=summary, samples=services.samples.recent())


@router.get("/queue", response_model=QueuePage)
async def queue(request: Request, limit: int = Query(100, ge=1, le=1000),
                offset: int = Query(0, ge=0, le=10_000_000)) -> QueuePage:
    """Jobs with tasks waiting to be placed, in the order the scheduler will consider them (of the projects the
    caller may read, each at its place in the whole queue)."""
    async with services_of(request).store.read() as connection:
        rows, total = await queue_page(connection, limit, offset, visible_projects(principal_of(request)))
    views = {view.id: view for view in await job_views(request, [r.id for r in rows])}
    return QueuePage(total=total, items=[
        QueueEntry(position=r.position, waiting_tasks=r.waiting, job=views[r.id])
        for r in rows if r.id in views
    ])
