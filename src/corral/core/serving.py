"""Deployment and replica states (DESIGN.md, Serving), the sets named from them, and the facts the serving
handlers and the router read."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from corral.core.crash_loop import replacement_delay
from corral.core.deployment_spec import DeploymentSpec
from corral.core.states import JOB_TERMINAL, Fact, JobState, TaskState, Transitions, moves


class DeploymentState(StrEnum):
    PENDING = "PENDING"
    SCALING = "SCALING"
    READY = "READY"
    DESTROYING = "DESTROYING"
    DESTROYED = "DESTROYED"


class ReplicaState(StrEnum):
    PROVISIONING = "PROVISIONING"
    DEGRADED = "DEGRADED"
    HEALTHY = "HEALTHY"
    UNHEALTHY = "UNHEALTHY"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    FAILED_TO_START = "FAILED_TO_START"


D, R = DeploymentState, ReplicaState

DEPLOYMENT_LIVE = frozenset({D.PENDING, D.SCALING, D.READY})
# Replicas that count towards the desired number: started or starting, not on their way out.
REPLICA_COUNTED = frozenset({R.PROVISIONING, R.DEGRADED, R.HEALTHY, R.UNHEALTHY})
# Replicas on their way to serving.
REPLICA_STARTING = frozenset({R.PROVISIONING, R.DEGRADED})
# Replicas on their way out: a replica created meanwhile takes the place of one of them.
REPLICA_LEAVING = frozenset({R.TERMINATING, R.FAILED_TO_START})
# Replicas whose process may be up: the health prober looks at these.
REPLICA_PROBED = frozenset({R.DEGRADED, R.HEALTHY, R.UNHEALTHY})

REPLICA_STOPPABLE = frozenset({R.PROVISIONING, R.DEGRADED, R.HEALTHY, R.UNHEALTHY, R.FAILED_TO_START})

# Every deployment state change is one of these rows (a deployment is created PENDING by a user's deploy).
DEPLOYMENT_TRANSITIONS = Transitions("deployment", [
    *moves(D.PENDING, D.SCALING, "CheckPendingDeployment", "its first replicas are created"),
    *moves(D.SCALING, D.READY, "ScalingDeployment", "as many replicas as it wants"),
    *moves(D.READY, D.SCALING, "CheckReplicaDeployment", "the number of replicas it wants changed"),
    *moves(D.READY, D.SCALING, "ReconcileDeployment", "a replica's process no longer runs"),
    *moves(DEPLOYMENT_LIVE, D.DESTROYING, Fact.UNDEPLOY, "undeployed by a user"),
    *moves(D.DESTROYING, D.DESTROYED, "DestroyingDeployment", "no replica left"),
])

# Every replica state change is one of these rows (a replica is created PROVISIONING, with its job).
REPLICA_TRANSITIONS = Transitions("replica", [
    *moves(R.PROVISIONING, R.DEGRADED, "ProvisioningReplica", "its process runs: waiting for a health check"),
    *moves(R.PROVISIONING, R.FAILED_TO_START, "ProvisioningReplica", "its job ended before its process ran"),
    *moves(frozenset({R.DEGRADED, R.UNHEALTHY}), R.HEALTHY, "HealthCheckReplica", "a health check passed"),
    *moves(frozenset({R.DEGRADED, R.HEALTHY}), R.UNHEALTHY, "HealthCheckReplica", "health checks failed"),
    *moves(frozenset({R.HEALTHY, R.UNHEALTHY}), R.DEGRADED, "HealthCheckReplica", "no recent health check"),
    *moves(frozenset({R.DEGRADED, R.HEALTHY, R.UNHEALTHY, R.FAILED_TO_START}), R.TERMINATING, "RunningReplica",
           "its process ended"),
    *moves(R.UNHEALTHY, R.TERMINATING, "ReplicaEviction", "unhealthy for too long: evicted"),
    *moves(REPLICA_STOPPABLE, R.TERMINATING, "ScalingDeployment", "scaled down, or its process ended"),
    *moves(REPLICA_STOPPABLE, R.TERMINATING, "DestroyingDeployment", "its deployment is destroyed"),
    *moves(R.TERMINATING, R.TERMINATED, "TerminatingReplica", "its job ended"),
])


@dataclass(frozen=True)
class ServingTarget:
    """A deployment or a replica as a handler sees it; `key` is its id."""

    id: int
    state: str
    since: float
    tries: int = 0
    timeout: float | None = None

    @property
    def key(self) -> int:
        return self.id


@dataclass(frozen=True)
class DeploymentFacts:
    id: int
    name: str
    spec: DeploymentSpec
    state: DeploymentState
    since: float
    replicas: int  # wanted now
    key_hashes: tuple[str, ...] = ()  # its own keys
    project_key_hashes: tuple[str, ...] = ()  # its project's tokens
    failed_starts: int = 0  # replicas in a row that ended before they served
    failed_start_at: float | None = None  # when the last of them ended

    def next_start_at(self, also_failed: int = 0, now: float = 0.0) -> float:
        """When it may create its next replica, counting `also_failed` more failed starts ending `now`."""
        failed = self.failed_starts + also_failed
        last = now if also_failed else self.failed_start_at
        return 0.0 if last is None else last + replacement_delay(failed)


@dataclass(frozen=True)
class ReplicaFacts:
    id: int
    deployment_id: int
    state: ReplicaState
    since: float
    job_id: int
    job_state: JobState
    task_state: TaskState | None
    address: str | None  # host:port of its running process, once known
    created_at: float = 0.0
    served: bool = False  # it passed a health check once

    @property
    def process_ended(self) -> bool:
        return self.job_state in JOB_TERMINAL

    @property
    def failed_start(self) -> bool:
        """Leaving now, it ends a failed start: it never served, and it failed rather than being scaled away."""
        served = self.served or self.state is R.HEALTHY  # HEALTHY before `served` was recorded counts too
        return not served and (self.process_ended or self.state in (R.FAILED_TO_START, R.UNHEALTHY))


@dataclass(frozen=True)
class Probe:
    """The health prober's latest word on a replica: when, whether it answered 2xx, failures in a row."""

    at: float
    ok: bool
    failures: int
    detail: str = ""

    @property
    def cause(self) -> str:
        """Why a replica is unhealthy, as its events say."""
        return f"health check failed {self.failures} times: {self.detail}" if self.failures else "health check passes"


@dataclass(frozen=True)
class Endpoint:
    replica_id: int
    address: str


@dataclass(frozen=True)
class Catalog:
    """What the router needs: the live deployments and the healthy endpoints of each, by deployment name."""

    deployments: dict[str, DeploymentFacts] = field(default_factory=dict)
    endpoints: dict[str, tuple[Endpoint, ...]] = field(default_factory=dict)
    # The latest replica of each deployment that ended before it ever served: (when, why).
    start_failures: dict[str, tuple[float, str]] = field(default_factory=dict)


@dataclass
class ServingSnapshot:
    now: float
    deployments: dict[int, DeploymentFacts] = field(default_factory=dict)
    replicas: dict[int, ReplicaFacts] = field(default_factory=dict)  # every replica not TERMINATED
    probes: dict[int, Probe] = field(default_factory=dict)

    def replicas_of(self, deployment_id: int) -> list[ReplicaFacts]:
        return [r for r in self.replicas.values() if r.deployment_id == deployment_id]

    def spec_of(self, replica: ReplicaFacts) -> DeploymentSpec:
        return self.deployments[replica.deployment_id].spec
