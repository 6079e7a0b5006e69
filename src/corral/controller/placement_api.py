"""/api/v1/jobs/{id}/placement: the full placement analysis of a job, on the cluster as it is now."""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends, HTTPException, Request, status

from corral.controller.identity import allow
from corral.controller.params import PathId
from corral.controller.services import services_of
from corral.core.roles import Action
from corral.core.views import PlacementAnalysis, WorkerFit
from corral.scheduling.analysis import judge_workers, quota_use
from corral.scheduling.rooms import Request as TaskRequest
from corral.scheduling.snapshot import JobPlacement, gate
from corral.store.job_views import job_row, task_ids_of
from corral.store.scheduling_reads import read_cluster

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"], dependencies=[Depends(allow(Action.READ, "job"))])


@router.get("/{job_id}/placement", response_model=PlacementAnalysis)
async def placement(job_id: PathId, request: Request) -> PlacementAnalysis:
    async with services_of(request).store.read() as connection:
        job = await job_row(connection, job_id)
        if job is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}")
        task_ids = await task_ids_of(connection, job_id)
        cluster = await read_cluster(connection)
    facts = JobPlacement.from_spec(job.spec, priority=job.priority, gang=job.gang)
    resources = job.spec.get("resources") or {}
    task_request = TaskRequest(float(resources.get("cpu", 1.0)), int(resources.get("memory", 0)),
                               resources.get("gpu", 0), facts.custom, facts.gpu_memory)
    failed_on = frozenset().union(*(cluster.avoid.get(task_id, frozenset()) for task_id in task_ids))
    held_back = gate(facts, cluster.dependencies, time.time())
    return PlacementAnalysis(
        job_id=job_id, state=job.state, pool=facts.pool, project=facts.project, priority=job.priority,
        pending_reason=job.pending_reason, gate=held_back.sentence() if held_back else None,
        quota=quota_use(facts.project, cluster.policy.quotas.get(facts.project, {}), cluster.running),
        workers=[WorkerFit(**vars(v)) for v in judge_workers(facts, task_request, cluster.rooms, failed_on)],
    )
