"""/api/v1/deployments: deploy, list, inspect, scale, key and undeploy; /api/v1/router/catalog for routers."""

from __future__ import annotations

import secrets
import time

from fastapi import APIRouter, Depends, HTTPException, Request, status

from corral.controller.admission import refusal
from corral.controller.audit import note
from corral.controller.identity import allow, person, principal_of, refuse_unless, visible_projects
from corral.controller.services import services_of
from corral.core.deployment_spec import DeploymentSpec
from corral.core.deployment_views import (
    CatalogDeployment,
    CatalogView,
    DeploymentDetail,
    DeploymentView,
    KeyReply,
    KeyRequest,
    LoadReport,
    ReplicaView,
    ScaleRequest,
    ServingHistoryEntry,
)
from corral.core.roles import Action
from corral.core.serving import DeploymentState
from corral.core.wire import Text
from corral.store.deployments import (
    NameTaken,
    NoSuchDeployment,
    add_key,
    deployment_facts,
    deployment_rows,
    destroy_deployment,
    insert_deployment,
    live_deployment,
    newest_named,
    replica_counts,
    replica_rows,
    scale_deployment,
    serving_history,
)

router = APIRouter(prefix="/api/v1", tags=["serving"], dependencies=[Depends(person)])
DEPLOY = [Depends(allow(Action.DEPLOY, "deployment"))]


@router.post("/deployments", status_code=status.HTTP_201_CREATED, response_model=DeploymentView)
async def deploy(spec: DeploymentSpec, request: Request) -> DeploymentView:
    services = services_of(request)
    principal = principal_of(request)
    refuse_unless(principal, Action.DEPLOY, spec.project, owner=principal.name)
    note(request, name=spec.name, project=spec.project)  # never more of the spec: its env may hold secrets
    if spec.bundle and not services.bundles.exists(spec.bundle):
        raise HTTPException(status.HTTP_400_BAD_REQUEST,
                            f"bundle {spec.bundle} was not uploaded (PUT /api/v1/bundles/{spec.bundle} first)")
    async with services.store.read() as connection:
        refused = await refusal(connection, spec.replica_job(), services.submit_settings)
    if refused:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"{refused} (each replica runs as a job)")
    try:
        async with services.store.write() as connection:
            await insert_deployment(connection, spec, [], time.time(), owner=principal.name)
    except NameTaken as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    await services.serving.changed()
    return await _one(request, spec.name)


@router.get("/deployments", response_model=list[DeploymentView])
async def list_deployments(request: Request, all: bool = False) -> list[DeploymentView]:
    """The deployments of the projects the caller may read (a cluster admin: all)."""
    async with services_of(request).store.read() as connection:
        rows = await deployment_rows(connection, shown_only=not all, limit=1000,
                                     projects=visible_projects(principal_of(request)))
        counts = await replica_counts(connection, [r.id for r in rows])
    return [_view(row, counts.get(row.id, {})) for row in rows]


@router.get("/deployments/{name}", response_model=DeploymentDetail,
            dependencies=[Depends(allow(Action.READ, "deployment"))])
async def deployment_info(name: Text, request: Request) -> DeploymentDetail:
    view = await _one(request, name)
    async with services_of(request).store.read() as connection:
        replica_list = await replica_rows(connection, view.id)
        history_rows = await serving_history(connection, view.id, limit=200)
    decision = services_of(request).router.autoscaled.get(name)
    return DeploymentDetail(
        **vars(view),  # its fields as read: the spec is not judged again by today's caps
        desired_replicas=decision.replicas if decision else None,
        autoscale_reason=decision.reason if decision else None,
        replica_list=[ReplicaView.model_validate(r, from_attributes=True) for r in replica_list],
        history=[ServingHistoryEntry.model_validate(r, from_attributes=True) for r in history_rows])


@router.post("/deployments/{name}/scale", response_model=DeploymentView, dependencies=DEPLOY)
async def scale(name: Text, body: ScaleRequest, request: Request) -> DeploymentView:
    services = services_of(request)
    try:
        async with services.store.write() as connection:
            await scale_deployment(connection, name, body.replicas, body.reason, time.time())
    except NoSuchDeployment as error:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(error)) from None
    except ValueError as error:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(error)) from None
    if body.replicas == 0:  # requests waiting for it end now rather than start it again
        services.router.unloaded(name, body.reason)
    await services.serving.changed()
    return await _one(request, name)


@router.post("/deployments/{name}/keys", status_code=status.HTTP_201_CREATED, response_model=KeyReply,
             dependencies=DEPLOY)
async def new_key(name: Text, body: KeyRequest, request: Request) -> KeyReply:
    key = body.key or f"crl-{secrets.token_urlsafe(24)}"
    try:
        async with services_of(request).store.write() as connection:
            await add_key(connection, name, key, time.time())
    except NoSuchDeployment as error:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(error)) from None
    await services_of(request).serving.changed()
    return KeyReply(deployment=name, key=key)


@router.delete("/deployments/{name}", response_model=DeploymentView, dependencies=DEPLOY)
async def undeploy(name: Text, request: Request) -> DeploymentView:
    services = services_of(request)
    try:
        async with services.store.write() as connection:
            await destroy_deployment(connection, name, time.time())
    except NoSuchDeployment as error:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(error)) from None
    services.router.unloaded(name, "undeployed")
    await services.serving.changed()
    return await _one(request, name, destroyed_too=True)


@router.post("/router/load", status_code=status.HTTP_204_NO_CONTENT, dependencies=[Depends(allow(Action.CLUSTER))])
async def report_load(report: LoadReport, request: Request) -> None:
    """A standalone router's load, summed into the controller's autoscaling while fresh."""
    services_of(request).router.report_load(report.router, report.loads, time.time())


@router.get("/router/catalog", response_model=CatalogView, dependencies=[Depends(allow(Action.CLUSTER))])
async def catalog(request: Request) -> CatalogView:
    """What a standalone `corral router` routes on: live deployments, their keys and healthy endpoints."""
    current = services_of(request).router.catalog
    pool = await services_of(request).catalog_pool()
    return CatalogView(**pool.to_json(), deployments=[
        CatalogDeployment(name=name, spec=facts.spec, replicas=facts.replicas, key_hashes=list(facts.key_hashes),
                          project_key_hashes=list(facts.project_key_hashes),
                          endpoints=[e.address for e in current.endpoints.get(name, ())],
                          replica_ids=[e.replica_id for e in current.endpoints.get(name, ())],
                          start_failure=current.start_failures.get(name))
        for name, facts in current.deployments.items()
    ])


async def _one(request: Request, name: str, destroyed_too: bool = False) -> DeploymentView:
    async with services_of(request).store.read() as connection:
        row = await live_deployment(connection, name)
        if row is None and destroyed_too:
            row = await newest_named(connection, name)
        if row is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no deployment named {name!r}")
        counts = await replica_counts(connection, [row.id])
    return _view(row, counts.get(row.id, {}))


def _view(row, counts: dict[str, int]) -> DeploymentView:
    facts = deployment_facts(row)
    return DeploymentView(id=row.id, name=row.name, state=DeploymentState(row.state), replicas=row.replicas,
                          replica_counts=counts, spec=facts.spec, keys=len(facts.key_hashes),
                          created_at=row.created_at, state_since=row.state_since, finished_at=row.finished_at,
                          failed_starts=facts.failed_starts,
                          next_start_at=facts.next_start_at() if facts.failed_starts else None, owner=row.owner)
