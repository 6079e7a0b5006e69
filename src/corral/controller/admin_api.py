"""/api/v1/admin: pool policies and project quotas, as the config file sets them, changed at run time."""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends, HTTPException, Path, Request, status

from corral.controller.audit import note
from corral.controller.identity import allow
from corral.controller.services import services_of
from corral.core.config import PoolPolicy, ProjectQuota
from corral.core.roles import Action
from corral.core.spec import NAME
from corral.store.policy import delete_pool, delete_quota, put_pool, put_quota, read_policy, read_pool_policy

router = APIRouter(prefix="/api/v1/admin", tags=["admin"], dependencies=[Depends(allow(Action.CLUSTER))])

Name = Path(..., max_length=100, pattern=f"^{NAME}$")


@router.get("/pools", response_model=dict[str, PoolPolicy])
async def list_pools(request: Request) -> dict[str, PoolPolicy]:
    """The pools configured; any other pool runs with the defaults."""
    async with services_of(request).store.read() as connection:
        return (await read_policy(connection)).pools


@router.get("/pools/{name}", response_model=PoolPolicy)
async def get_pool(request: Request, name: str = Name) -> PoolPolicy:
    async with services_of(request).store.read() as connection:
        return await read_pool_policy(connection, name)


@router.put("/pools/{name}", response_model=PoolPolicy)
async def set_pool(policy: PoolPolicy, request: Request, name: str = Name) -> PoolPolicy:
    async with services_of(request).store.write() as connection:
        await put_pool(connection, name, policy, time.time())
    services_of(request).submit_settings.changed()
    services_of(request).engine.wake()
    return policy


@router.delete("/pools/{name}", status_code=status.HTTP_204_NO_CONTENT)
async def reset_pool(request: Request, name: str = Name) -> None:
    async with services_of(request).store.write() as connection:
        if not await delete_pool(connection, name):
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"pool {name} has no configured policy")
    services_of(request).submit_settings.changed()
    services_of(request).engine.wake()


@router.get("/quotas", response_model=dict[str, ProjectQuota])
async def list_quotas(request: Request) -> dict[str, ProjectQuota]:
    async with services_of(request).store.read() as connection:
        policy = await read_policy(connection)
    return {project: ProjectQuota(limits=limits) for project, limits in policy.quotas.items()}


@router.get("/projects/{name}/quota", response_model=ProjectQuota)
async def get_quota(request: Request, name: str = Name) -> ProjectQuota:
    async with services_of(request).store.read() as connection:
        return ProjectQuota(limits=(await read_policy(connection)).quotas.get(name, {}))


@router.put("/projects/{name}/quota", response_model=ProjectQuota)
async def set_quota(quota: ProjectQuota, request: Request, name: str = Name) -> ProjectQuota:
    note(request, limits=quota.limits)
    async with services_of(request).store.write() as connection:
        await put_quota(connection, name, quota, time.time())
    services_of(request).engine.wake()  # a raised limit may let waiting jobs start
    return quota


@router.delete("/projects/{name}/quota", status_code=status.HTTP_204_NO_CONTENT)
async def remove_quota(request: Request, name: str = Name) -> None:
    async with services_of(request).store.write() as connection:
        if not await delete_quota(connection, name):
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"project {name} has no quota")
    services_of(request).engine.wake()
