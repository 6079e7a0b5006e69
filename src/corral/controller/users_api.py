"""/api/v1/whoami, /users, /projects/{project}/members and /tokens: who calls, the people, their roles, their tokens.

Users and their cluster-admin flag are a cluster admin's; a project's members are its project admins' too. A user
makes its own personal tokens (a cluster admin may make one for anyone): shown once, kept as a hash, revocable.
"""

from __future__ import annotations

import secrets
import time

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, status

from corral.controller.identity import allow, authenticate, person
from corral.controller.params import PathId
from corral.controller.services import services_of
from corral.core.roles import ADMIN, Action, Principal, Role
from corral.core.user_views import (
    USER_NAME,
    IssuedUserToken,
    MemberRequest,
    MemberView,
    TokenCreate,
    TokenInfo,
    UserChange,
    UserName,
    UserRequest,
    UserTokenView,
    UserView,
    WhoAmI,
)
from corral.store.database import Conflict
from corral.store.users import (
    UserRecord,
    all_users,
    delete_membership,
    insert_token,
    insert_user,
    project_members,
    put_membership,
    revoke_user_token,
    token_owner,
    token_rows,
    update_user,
    user_by_name,
)

TOKEN_PREFIX = "cu_"
router = APIRouter(prefix="/api/v1", tags=["users"])
CLUSTER_ONLY = [Depends(allow(Action.CLUSTER))]
NamePath = Path(..., pattern=USER_NAME)
ProjectPath = Path(..., max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


@router.get("/whoami", response_model=WhoAmI)
async def whoami(request: Request, principal: Principal = Depends(authenticate)) -> WhoAmI:
    credential = request.state.credential
    return WhoAmI(name=principal.name, role=principal.role, cluster_admin=principal.cluster_admin,
                  projects={p: str(r) for p, r in principal.projects.items()},
                  token=TokenInfo(kind=credential.kind, id=credential.id, expires_at=credential.expires_at))


@router.post("/users", status_code=status.HTTP_201_CREATED, response_model=UserView, dependencies=CLUSTER_ONLY)
async def create_user(body: UserRequest, request: Request) -> UserView:
    if body.name == ADMIN:
        raise HTTPException(status.HTTP_409_CONFLICT, f"{ADMIN} is the admin token's name; choose another")
    try:
        async with services_of(request).store.write() as connection:
            await insert_user(connection, body.name, body.cluster_admin, body.unix_user,
                              {p: Role(r) for p, r in body.projects.items()}, time.time())
    except Conflict:
        raise HTTPException(status.HTTP_409_CONFLICT, f"a user named {body.name} exists already") from None
    return await _view(request, body.name)


@router.get("/users", response_model=list[UserView], dependencies=CLUSTER_ONLY)
async def list_users(request: Request) -> list[UserView]:
    async with services_of(request).store.read() as connection:
        return [_user_view(user) for user in await all_users(connection)]


@router.get("/users/{name}", response_model=UserView)
async def get_user(request: Request, name: str = NamePath, principal: Principal = Depends(person)) -> UserView:
    """A cluster admin's, or a user's own."""
    if name != principal.name and not principal.cluster_admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"{principal.name} may read only its own user, not {name}")
    return await _view(request, name)


@router.patch("/users/{name}", response_model=UserView, dependencies=CLUSTER_ONLY)
async def change_user(body: UserChange, request: Request, name: str = NamePath) -> UserView:
    changes = body.model_dump(exclude_unset=True)
    for flag in ("cluster_admin", "disabled"):  # null: unchanged
        if changes.get(flag) is None:
            changes.pop(flag, None)
    if "disabled" in changes:
        changes["disabled_at"] = time.time() if changes.pop("disabled") else None
    async with services_of(request).store.write() as connection:
        user = await _existing(connection, name)
        await update_user(connection, user.id, **changes)
    return await _view(request, name)


@router.get("/projects/{project}/members", response_model=list[MemberView],
            dependencies=[Depends(allow(Action.MEMBERS, "project"))])
async def members(request: Request, project: str = ProjectPath) -> list[MemberView]:
    async with services_of(request).store.read() as connection:
        return [MemberView(name=name, role=role) for name, role in await project_members(connection, project)]


@router.put("/projects/{project}/members/{name}", response_model=MemberView,
            dependencies=[Depends(allow(Action.MEMBERS, "project"))])
async def set_member(body: MemberRequest, request: Request, project: str = ProjectPath,
                     name: str = NamePath) -> MemberView:
    async with services_of(request).store.write() as connection:
        user = await _existing(connection, name)
        await put_membership(connection, user.id, project, Role(body.role), time.time())
    return MemberView(name=name, role=body.role)


@router.delete("/projects/{project}/members/{name}", status_code=status.HTTP_204_NO_CONTENT,
               dependencies=[Depends(allow(Action.MEMBERS, "project"))])
async def remove_member(request: Request, project: str = ProjectPath, name: str = NamePath) -> None:
    async with services_of(request).store.write() as connection:
        user = await _existing(connection, name)
        if not await delete_membership(connection, user.id, project):
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"{name} is not a member of project {project}")


@router.post("/tokens", status_code=status.HTTP_201_CREATED, response_model=IssuedUserToken)
async def create_token(body: TokenCreate, request: Request, principal: Principal = Depends(person)) -> IssuedUserToken:
    """A personal token for the caller (a cluster admin may name another user)."""
    name = _whose(principal, body.user)
    token = f"{TOKEN_PREFIX}{secrets.token_urlsafe(32)}"
    now = time.time()
    expires_at = now + body.expires_in if body.expires_in is not None else None
    async with services_of(request).store.write() as connection:
        user = await _existing(connection, name)
        if user.disabled_at is not None:
            raise HTTPException(status.HTTP_409_CONFLICT, f"user {name} is disabled")
        token_id = await insert_token(connection, user.id, body.name, token, now, expires_at)
    return IssuedUserToken(id=token_id, user=name, name=body.name, prefix=token[:12], token=token, created_at=now,
                           expires_at=expires_at)


@router.get("/tokens", response_model=list[UserTokenView])
async def list_user_tokens(request: Request, user: UserName | None = Query(None),
                           principal: Principal = Depends(person)) -> list[UserTokenView]:
    """The caller's tokens (a cluster admin: everyone's, or `user`'s); never their secrets."""
    async with services_of(request).store.read() as connection:
        if user is None and principal.cluster_admin:
            rows = await token_rows(connection, None)
        else:
            rows = await token_rows(connection, (await _existing(connection, _whose(principal, user))).id)
    return [UserTokenView.model_validate(row, from_attributes=True) for row in rows]


@router.delete("/tokens/{token_id}", status_code=status.HTTP_204_NO_CONTENT)
async def revoke(request: Request, token_id: PathId, principal: Principal = Depends(person)) -> None:
    """Refused from the next request on, here and at every router."""
    async with services_of(request).store.write() as connection:
        owner = await token_owner(connection, token_id)
        if owner is None or (owner != principal.name and not principal.cluster_admin):
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"{principal.name} has no token {token_id}")
        if not await revoke_user_token(connection, token_id, time.time()):
            raise HTTPException(status.HTTP_409_CONFLICT, f"token {token_id} is revoked already")


def _whose(principal: Principal, user: str | None) -> str:
    """The user a token request is about: the caller's own, or (a cluster admin's) another's."""
    if user is None or user == principal.name:
        if principal.name == ADMIN:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                                "the admin token is no user's: name the user (user=...)")
        return principal.name
    if not principal.cluster_admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN,
                            f"{principal.name} is {principal.role}: only a cluster admin names another user")
    return user


async def _existing(connection, name: str) -> UserRecord:
    user = await user_by_name(connection, name)
    if user is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no user {name}")
    return user


async def _view(request: Request, name: str) -> UserView:
    async with services_of(request).store.read() as connection:
        return _user_view(await _existing(connection, name))


def _user_view(user: UserRecord) -> UserView:
    return UserView(name=user.name, cluster_admin=user.cluster_admin, unix_user=user.unix_user,
                    projects={p: str(r) for p, r in user.projects.items()}, created_at=user.created_at,
                    disabled_at=user.disabled_at)
