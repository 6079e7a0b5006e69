"""/api/v1/admin/projects/{name}/tokens: bearer keys that call the project's deployments through the router.

A project token reaches the router's deployments of its project and nothing else (not the
API, not another project's deployments). It is shown once, when issued; the store keeps its
hash. Issuing and revoking republish the router's catalog before answering, so the change
holds for the next request at this controller (and at a standalone router once it polls).
"""

from __future__ import annotations

import secrets
import time

from fastapi import APIRouter, Depends, HTTPException, Request, status

from corral.controller.admin_api import Name
from corral.controller.identity import allow, principal_of
from corral.controller.params import PathId
from corral.controller.services import services_of
from corral.core.roles import Action
from corral.core.views import IssuedToken, ProjectToken, TokenRequest
from corral.store.database import Conflict
from corral.store.project_tokens import issue_token, list_tokens, revoke_token

router = APIRouter(prefix="/api/v1/admin/projects", tags=["admin"],
                   dependencies=[Depends(allow(Action.PROJECT_TOKENS, "project"))])

TOKEN_PREFIX = "crp-"


@router.post("/{name}/tokens", status_code=status.HTTP_201_CREATED, response_model=IssuedToken)
async def issue(request: Request, body: TokenRequest | None = None, name: str = Name) -> IssuedToken:
    token = (body and body.token) or f"{TOKEN_PREFIX}{secrets.token_urlsafe(24)}"
    now = time.time()
    try:
        async with services_of(request).store.write() as connection:
            token_id = await issue_token(connection, name, token, now, owner=principal_of(request).name)
    except Conflict:
        raise HTTPException(status.HTTP_409_CONFLICT, "that token is already issued: choose another, "
                                                      "or let corral make one") from None
    await services_of(request).serving.changed()
    return IssuedToken(id=token_id, project=name, created_at=now, token=token)


@router.get("/{name}/tokens", response_model=list[ProjectToken])
async def tokens(request: Request, name: str = Name) -> list[ProjectToken]:
    async with services_of(request).store.read() as connection:
        rows = await list_tokens(connection, name)
    return [ProjectToken.model_validate(row, from_attributes=True) for row in rows]


@router.delete("/{name}/tokens/{token_id}", status_code=status.HTTP_204_NO_CONTENT)
async def revoke(request: Request, token_id: PathId, name: str = Name) -> None:
    async with services_of(request).store.write() as connection:
        if not await revoke_token(connection, name, token_id):
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"project {name} has no token {token_id}")
    await services_of(request).serving.changed()
