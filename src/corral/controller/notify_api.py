"""Job notifications' settings: the cluster's webhook signing secret (cluster admins), and each project's default
notify URL (its project admins set it; its members read it)."""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends, HTTPException, Request, status

from corral.controller.admin_api import Name
from corral.controller.identity import allow, principal_of
from corral.controller.services import services_of
from corral.core.roles import Action
from corral.core.webhooks import ProjectNotify, WebhookSecret
from corral.store.webhooks import (
    clear_project_default,
    project_defaults,
    rotate_secret,
    set_project_default,
    webhook_secret,
)

router = APIRouter(prefix="/api/v1/admin", tags=["admin"])
CLUSTER_ONLY = [Depends(allow(Action.CLUSTER))]


@router.get("/notify/secret", response_model=WebhookSecret, dependencies=CLUSTER_ONLY)
async def read_secret(request: Request) -> WebhookSecret:
    async with services_of(request).store.write() as connection:  # the first read makes it
        return WebhookSecret(secret=await webhook_secret(connection))


@router.post("/notify/secret", response_model=WebhookSecret, dependencies=CLUSTER_ONLY)
async def new_secret(request: Request) -> WebhookSecret:
    """A new secret, used from the next delivery on (receivers must be given it)."""
    async with services_of(request).store.write() as connection:
        return WebhookSecret(secret=await rotate_secret(connection))


@router.get("/notify/projects", response_model=dict[str, str], dependencies=CLUSTER_ONLY)
async def list_defaults(request: Request) -> dict[str, str]:
    """Every project's default notify URL."""
    async with services_of(request).store.read() as connection:
        return await project_defaults(connection)


@router.get("/projects/{name}/notify", response_model=ProjectNotify,
            dependencies=[Depends(allow(Action.READ, "project"))])
async def read_default(request: Request, name: str = Name) -> ProjectNotify:
    async with services_of(request).store.read() as connection:
        found = await project_defaults(connection, name)
    if name not in found:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"project {name} has no default notify URL")
    return ProjectNotify(url=found[name])


@router.put("/projects/{name}/notify", response_model=ProjectNotify,
            dependencies=[Depends(allow(Action.MEMBERS, "project"))])
async def set_default(body: ProjectNotify, request: Request, name: str = Name) -> ProjectNotify:
    async with services_of(request).store.write() as connection:
        await set_project_default(connection, name, body.url, principal_of(request).name, time.time())
    return body


@router.delete("/projects/{name}/notify", status_code=status.HTTP_204_NO_CONTENT,
               dependencies=[Depends(allow(Action.MEMBERS, "project"))])
async def clear_default(request: Request, name: str = Name) -> None:
    async with services_of(request).store.write() as connection:
        if not await clear_project_default(connection, name):
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"project {name} has no default notify URL")
