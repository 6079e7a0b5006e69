"""What the serving API returns: deployments, their replicas and history, and the router's catalog."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator

from corral.core.deployment_spec import MAX_DEPLOYMENT_REPLICAS, DeploymentSpec
from corral.core.serving import DeploymentState, ReplicaState
from corral.core.wire import WireModel


class ReplicaView(BaseModel):
    id: int
    job_id: int
    state: ReplicaState
    address: str | None
    reason: str | None
    state_since: float
    created_at: float


class ServingHistoryEntry(BaseModel):
    at: float
    replica_id: int | None
    handler: str
    result: str
    from_state: str | None
    to_state: str | None
    message: str | None


class DeploymentView(BaseModel):
    id: int
    name: str
    state: DeploymentState
    replicas: int = Field(..., description="replicas wanted now")
    replica_counts: dict[str, int]
    spec: DeploymentSpec
    keys: int = Field(..., description="how many per-deployment API keys exist")
    created_at: float
    state_since: float
    finished_at: float | None = None
    failed_starts: int = Field(0, description="replicas in a row that ended before they served")
    next_start_at: float | None = Field(None, description="while replicas keep failing: no new one before this")
    owner: str = Field("admin", description="the user who deployed it")


class DeploymentDetail(DeploymentView):
    desired_replicas: int | None = Field(None, description="the autoscaler's latest decision, if it made one")
    autoscale_reason: str | None = None
    replica_list: list[ReplicaView] = []
    history: list[ServingHistoryEntry] = []


class ScaleRequest(WireModel):
    replicas: int = Field(..., ge=0, le=MAX_DEPLOYMENT_REPLICAS)
    reason: str = Field("scaled by a user", max_length=200)


class KeyRequest(WireModel):
    key: str | None = Field(None, min_length=16, max_length=500, description="default: a new random key")


class KeyReply(BaseModel):
    deployment: str
    key: str


class CatalogDeployment(BaseModel):
    name: str
    spec: DeploymentSpec
    replicas: int
    key_hashes: list[str]
    project_key_hashes: list[str] = []  # its project's tokens
    endpoints: list[str]  # host:port of each healthy replica
    replica_ids: list[int]
    start_failure: tuple[float, str] | None = None  # the latest replica that ended before it served


class LoadReport(WireModel):
    """A standalone router's load per deployment (in flight plus waiting), for the controller's autoscaler."""

    router: str = Field(..., min_length=1, max_length=100, description="the reporting router's id")
    loads: dict[str, float] = Field(..., max_length=10_000)

    @field_validator("loads")
    @classmethod
    def _counts(cls, loads: dict[str, float]) -> dict[str, float]:
        bad = [name for name, load in loads.items() if not 0 <= load <= 1e9]
        if bad:
            raise ValueError(f"loads must be counts of requests: {', '.join(bad[:5])}")
        return loads


class CatalogView(BaseModel):
    deployments: list[CatalogDeployment]
    rooms: list[dict] = []  # free room per alive worker (placement's WorkerRoom)
    holdings: dict[str, list[dict]] = {}  # deployment -> what its placed replicas hold, per worker
