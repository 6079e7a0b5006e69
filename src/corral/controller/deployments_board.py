"""What the dashboard's Deployments page reads: each deployment, its replicas with their health, its latest events.

Health is the prober's latest word (kept in the serving engine's memory, not in the store), so
this is where the stored replicas and the live probes meet.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel

from corral.controller.identity import allow, principal_of, visible_projects
from corral.controller.services import services_of
from corral.core.roles import Action
from corral.core.serving import REPLICA_COUNTED, DeploymentState, Probe, ReplicaState
from corral.core.views import EventView
from corral.store.deployments import deployment_facts, deployment_rows, replicas_with_workers
from corral.store.events import latest_by_deployment

router = APIRouter(prefix="/api/v1", tags=["dashboard"], dependencies=[Depends(allow(Action.READ))])


class ReplicaHealth(BaseModel):
    id: int
    state: ReplicaState
    state_since: float
    job_id: int
    address: str | None
    worker_id: str | None
    worker_name: str | None
    probed_at: float | None = None  # the last health check: when, whether it passed, what it saw
    probe_ok: bool | None = None
    probe_detail: str | None = None
    failures: int = 0  # health checks failed in a row


class DeploymentHealth(BaseModel):
    id: int
    name: str
    state: DeploymentState
    state_since: float
    wanted: int
    ready: int  # HEALTHY replicas
    models: list[str]
    project: str
    replicas: list[ReplicaHealth]
    events: list[EventView]


class DeploymentsSummary(BaseModel):
    deployments: dict[str, int]  # by state
    wanted: int
    ready: int
    unhealthy: int  # replicas UNHEALTHY, or failing their health check right now
    degraded: list[str]  # deployments with fewer ready replicas than wanted


class DeploymentsBoard(BaseModel):
    summary: DeploymentsSummary
    deployments: list[DeploymentHealth]


def with_probe(replica: ReplicaHealth, probe: Probe | None) -> ReplicaHealth:
    if probe is None:
        return replica
    return replica.model_copy(update={"probed_at": probe.at, "probe_ok": probe.ok, "probe_detail": probe.detail,
                                      "failures": probe.failures})


def summarize(board: Sequence[DeploymentHealth]) -> DeploymentsSummary:
    """Counts for the overview: deployments by state, replicas wanted and ready, and which fall short."""
    return DeploymentsSummary(
        deployments=dict(Counter(str(d.state) for d in board)),
        wanted=sum(d.wanted for d in board), ready=sum(d.ready for d in board),
        unhealthy=sum(r.state is ReplicaState.UNHEALTHY or (r.state in REPLICA_COUNTED and r.failures > 0)
                      for d in board for r in d.replicas),
        degraded=[d.name for d in board if d.ready < d.wanted],
    )


@router.get("/overview/deployments", response_model=DeploymentsBoard)
async def deployments_board(request: Request,
                            events: int = Query(30, ge=0, le=500, description="latest events per deployment")
                            ) -> DeploymentsBoard:
    """Live and destroying deployments, newest first, each with its replicas not yet TERMINATED: those of the
    projects the caller may read (a member signed in to the dashboard was answered 401, and signed out)."""
    services = services_of(request)
    probes: dict[int, Probe] = dict(services.serving.probes)
    visible = visible_projects(principal_of(request))
    async with services.store.read() as connection:
        rows = [row for row in await deployment_rows(connection)
                if visible is None or deployment_facts(row).spec.project in visible]
        replica_rows = await replicas_with_workers(connection, [r.id for r in rows])
        latest = await latest_by_deployment(connection, [r.name for r in rows], events) if events else {}
    board = []
    for row in rows:
        mine = [with_probe(ReplicaHealth.model_validate(r, from_attributes=True), probes.get(r.id))
                for r in replica_rows if r.deployment_id == row.id]
        spec = deployment_facts(row).spec
        board.append(DeploymentHealth(
            id=row.id, name=row.name, state=DeploymentState(row.state), state_since=row.state_since,
            wanted=row.replicas, ready=sum(r.state is ReplicaState.HEALTHY for r in mine),
            models=spec.model_names, project=spec.project, replicas=mine, events=latest.get(row.name, [])))
    return DeploymentsBoard(summary=summarize(board), deployments=board)
