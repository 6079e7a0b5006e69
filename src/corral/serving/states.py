"""Deployment and replica states (DESIGN.md, Serving) and the sets named from them."""

from __future__ import annotations

from enum import StrEnum


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
REPLICA_ENDED = frozenset({R.TERMINATED})
# Replicas that count towards the desired number: started or starting, not on their way out.
REPLICA_COUNTED = frozenset({R.PROVISIONING, R.DEGRADED, R.HEALTHY, R.UNHEALTHY})
# Replicas on their way to serving.
REPLICA_STARTING = frozenset({R.PROVISIONING, R.DEGRADED})
# Replicas on their way out: a replica created meanwhile takes the place of one of them.
REPLICA_LEAVING = frozenset({R.TERMINATING, R.FAILED_TO_START})
# Replicas whose process may be up: the health prober looks at these.
REPLICA_PROBED = frozenset({R.DEGRADED, R.HEALTHY, R.UNHEALTHY})
