"""The one authentication step and the one authorization step of every user-facing route.

`authenticate` turns the bearer token into a Principal (corral.core.roles), read from the store on every request
so that a revoked or expired token, or a disabled user, is refused at once: the admin token acts as the cluster
admin "admin"; a personal token as its user, with the user's roles; a job's token (job_tokens.mint) as the job's
owner, capped to the job's project (and, on submission, its priority), and within the job's launch tree.

`allow(action, about)` is the dependency of a route: it resolves the object the route is about (a job, a
deployment, a project) to its project and owner, and asks core.roles.decide; a refusal is a 403 with its reason.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from fastapi import Depends, HTTPException, status
from starlette.requests import HTTPConnection

from corral.controller.auth import _bearer
from corral.controller.job_tokens import FORM, mint, out_of_reach
from corral.controller.services import Services, services_of
from corral.core.roles import ADMIN, RULES, Action, Principal, Role, decide
from corral.core.wire import parse_id
from corral.scheduling.policy import DEFAULT_PROJECT
from corral.store.deployments import live_deployment
from corral.store.job_views import job_row
from corral.store.launches import launched_within
from corral.store.users import holder_of, mark_used, user_by_name

USE_RECORDED_EVERY = 60.0  # seconds: a token's last use is written at most this often, not on every request

About = Literal["job", "deployment", "project"]


@dataclass(frozen=True)
class Credential:
    """Which token the principal presented (GET /whoami)."""

    kind: Literal["admin", "user", "job"]
    id: int | None = None
    expires_at: float | None = None


ADMIN_PRINCIPAL = Principal(name=ADMIN, cluster_admin=True)


async def identify(services: Services, token: str, now: float) -> tuple[Principal, Credential]:
    """The principal of a token, else 401."""
    admin = services.tokens.admin
    if hmac.compare_digest(token, admin):
        return ADMIN_PRINCIPAL, Credential("admin")
    match = FORM.fullmatch(token)
    if match and hmac.compare_digest(token, mint(admin, int(match.group(1)))):
        job_id = int(match.group(1))
        return await _job_principal(services, job_id), Credential("job", job_id)
    async with services.store.read() as connection:
        holder = await holder_of(connection, token, now)
    if holder is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "wrong token")
    if holder.last_used_at is None or now - holder.last_used_at >= USE_RECORDED_EVERY:
        async with services.store.write() as connection:
            await mark_used(connection, holder.token_id, now)
    user = holder.user
    return (Principal(name=user.name, cluster_admin=user.cluster_admin, projects=user.projects),
            Credential("user", holder.token_id, holder.expires_at))


async def _job_principal(services: Services, job_id: int) -> Principal:
    """The job's owner, with the owner's role in the job's project only, at most the job's priority."""
    async with services.store.read() as connection:
        job = await job_row(connection, job_id)
        if job is None:  # a token of a job gone: it reaches nothing of any project
            return Principal(name=f"job {job_id}", job_id=job_id)
        project = (job.spec or {}).get("project") or DEFAULT_PROJECT
        owner = await user_by_name(connection, job.owner) if job.owner != ADMIN else None
    if job.owner == ADMIN or (owner and owner.cluster_admin and owner.disabled_at is None):
        role: Role | None = Role.CLUSTER_ADMIN
    else:
        role = owner.projects.get(project) if owner and owner.disabled_at is None else None
    return Principal(name=job.owner, projects={project: role} if role else {}, job_id=job_id,
                     priority_cap=job.priority)


async def authenticate(connection: HTTPConnection) -> Principal:
    """The dependency that names the caller (request.state.principal); 401 without a good token."""
    principal, credential = await identify(services_of(connection), _bearer(connection), time.time())
    connection.state.principal = principal
    connection.state.credential = credential
    return principal


async def person(connection: HTTPConnection, principal: Principal = Depends(authenticate)) -> Principal:
    """The dependency of routes beyond a job's launch tree (workers, deployments, the cluster's settings): a job's
    token does not reach them."""
    if principal.job_id is not None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED,
                            f"the token of job {principal.job_id} reaches only its launch tree's jobs, not this")
    return principal


def principal_of(connection: HTTPConnection) -> Principal:
    return connection.state.principal


def allow(action: Action, about: About | None = None, job_tokens: bool = False) -> Callable[..., Awaitable[Principal]]:
    """The dependency of a route that does `action` (on the job, deployment or project its path names); with
    `job_tokens`, a job's token may call it too (within its launch tree)."""

    async def check(connection: HTTPConnection, principal: Principal = Depends(authenticate)) -> Principal:
        if not job_tokens:
            await person(connection, principal)
        if principal.cluster_admin and principal.job_id is None:
            return principal  # may do anything to anything: no read of the object (a missing one is the route's 404)
        project, owner = await object_of(connection, about)
        if about is not None and project is None:
            return principal  # no such object: the route answers 404
        refuse_unless(principal, action, project, owner)
        if about == "job" and principal.job_id is not None:
            await check_launch_tree(connection, principal.job_id, int(connection.path_params["job_id"]))
        return principal

    return check


def refuse_unless(principal: Principal, action: Action, project: str | None, owner: str | None = None) -> None:
    refused = decide(principal, action, project, owner)
    if refused:
        raise HTTPException(status.HTTP_403_FORBIDDEN, refused)


async def check_launch_tree(connection: HTTPConnection, caller: int, job_id: int) -> None:
    """A job's token reaches its own job and the jobs launched from it only."""
    async with services_of(connection).store.read() as store:
        within = await launched_within(store, job_id, caller)
    if within is False:
        raise HTTPException(status.HTTP_403_FORBIDDEN, out_of_reach(caller, job_id))


async def object_of(connection: HTTPConnection, about: About | None) -> tuple[str | None, str | None]:
    """(project, owner) of the object the path names; (None, None) when it names none that exists."""
    params = connection.path_params
    if about == "project":
        return params.get("project") or params.get("name"), None
    if about == "job":
        job_id = parse_id(str(params.get("job_id", "")))
        if job_id is None:
            return None, None
        async with services_of(connection).store.read() as store:
            return await job_facts(store, job_id)
    if about == "deployment":
        async with services_of(connection).store.read() as store:
            row = await live_deployment(store, str(params.get("name", "")))
        return ((row.spec or {}).get("project") or DEFAULT_PROJECT, row.owner) if row else (None, None)
    return None, None


async def job_facts(store, job_id: int) -> tuple[str | None, str | None]:
    """(project, owner) of a job; (None, None) when there is no such job."""
    row = await job_row(store, job_id)
    return ((row.spec or {}).get("project") or DEFAULT_PROJECT, row.owner) if row else (None, None)


def visible_projects(principal: Principal) -> frozenset[str] | None:
    """The projects whose objects a listing shows the caller; None: all (a cluster admin)."""
    if principal.cluster_admin:
        return None
    return frozenset(project for project, role in principal.projects.items() if Action.READ in RULES[role])
