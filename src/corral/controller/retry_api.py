"""The retry chain's API: a job's attempts, and the default policies an admin sets.

    GET    /api/v1/jobs/{id}/attempts                    the chain, oldest first, each job's state and cause
    GET    /api/v1/admin/retry-policy                    the cluster default: as stored, and in effect
    PUT    /api/v1/admin/retry-policy                    set it (fields left out are inherited)
    DELETE /api/v1/admin/retry-policy                    back to the config file's and the built-in one
    GET|PUT|DELETE /api/v1/admin/projects/{project}/retry-policy    the same for one project
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends, HTTPException, Path, Request, status
from pydantic import BaseModel

from corral.controller.audit import note
from corral.controller.identity import allow, person
from corral.controller.params import PathId
from corral.controller.retry_defaults import cluster_layers
from corral.controller.retry_views import retry_fields
from corral.controller.services import services_of
from corral.core.retry_policy import RetryPolicy, effective_policy
from corral.core.roles import Action
from corral.core.views import RetryAttemptView
from corral.store.job_views import job_rows
from corral.store.retries import CLUSTER, chain_ids, store_default, stored_default

router = APIRouter(prefix="/api/v1", tags=["retries"], dependencies=[Depends(person)])
CLUSTER_ONLY = [Depends(allow(Action.CLUSTER))]

ProjectName = Path(..., min_length=1, max_length=200)


class DefaultPolicyView(BaseModel):
    scope: str
    policy: RetryPolicy | None  # as stored by an admin; None: nothing stored at this level
    effective: RetryPolicy  # what a job of this scope without a policy of its own gets


@router.get("/jobs/{job_id}/attempts", response_model=list[RetryAttemptView],
            dependencies=[Depends(allow(Action.READ, "job"))])
async def job_attempts(job_id: PathId, request: Request) -> list[RetryAttemptView]:
    async with services_of(request).store.read() as connection:
        chain = (await chain_ids(connection, [job_id])).get(job_id)
        if chain is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}")
        rows = await job_rows(connection, chain)
        fields = await retry_fields(connection, list(rows.values()))
    return [
        RetryAttemptView(id=i, retry_count=rows[i].retry_count, state=rows[i].state, retry_cause=rows[i].retry_cause,
                         retry_state=fields[i]["retry_state"], created_at=rows[i].created_at,
                         finished_at=rows[i].finished_at)
        for i in chain
    ]


@router.get("/admin/retry-policy", response_model=DefaultPolicyView, dependencies=CLUSTER_ONLY)
async def get_cluster_default(request: Request) -> DefaultPolicyView:
    return await _view(request, CLUSTER)


@router.put("/admin/retry-policy", response_model=DefaultPolicyView, dependencies=CLUSTER_ONLY)
async def put_cluster_default(policy: RetryPolicy, request: Request) -> DefaultPolicyView:
    return await _set(request, CLUSTER, policy)


@router.delete("/admin/retry-policy", response_model=DefaultPolicyView, dependencies=CLUSTER_ONLY)
async def delete_cluster_default(request: Request) -> DefaultPolicyView:
    return await _set(request, CLUSTER, None)


@router.get("/admin/projects/{project}/retry-policy", response_model=DefaultPolicyView, dependencies=CLUSTER_ONLY)
async def get_project_default(request: Request, project: str = ProjectName) -> DefaultPolicyView:
    return await _view(request, ("project", project))


@router.put("/admin/projects/{project}/retry-policy", response_model=DefaultPolicyView, dependencies=CLUSTER_ONLY)
async def put_project_default(policy: RetryPolicy, request: Request, project: str = ProjectName) -> DefaultPolicyView:
    return await _set(request, ("project", project), policy)


@router.delete("/admin/projects/{project}/retry-policy", response_model=DefaultPolicyView, dependencies=CLUSTER_ONLY)
async def delete_project_default(request: Request, project: str = ProjectName) -> DefaultPolicyView:
    return await _set(request, ("project", project), None)


async def _set(request: Request, scope: tuple[str, str], policy: RetryPolicy | None) -> DefaultPolicyView:
    now = time.time()
    async with services_of(request).store.write() as connection:
        await store_default(connection, *scope, policy, now)
    services_of(request).submit_settings.changed()
    if policy is not None:
        note(request, policy=policy.model_dump(mode="json", exclude_unset=True))
    return await _view(request, scope)


async def _view(request: Request, scope: tuple[str, str]) -> DefaultPolicyView:
    config_default = services_of(request).retry_config
    async with services_of(request).store.read() as connection:
        stored = await stored_default(connection, *scope)
        layers = (await cluster_layers(connection, config_default) if scope == CLUSTER
                  else await services_of(request).submit_settings.retry_layers(connection, scope[1], config_default))
    return DefaultPolicyView(scope=_scope_name(scope), policy=stored, effective=effective_policy(layers))


def _scope_name(scope: tuple[str, str]) -> str:
    return "cluster" if scope == CLUSTER else f"project {scope[1]}"
