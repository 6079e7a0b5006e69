"""What a serving handler asks of the world beyond its targets' declared moves, as typed data.

The serving coordinator hands each effect to the applier registered for its type
(corral.engine.serving_coordinator). An effect names the deployment or replica it is about, so
that a write about it that fails sets that target aside, and declares in `moves` the states it
moves an entity to on the handler's behalf, so the tables can be checked against what handlers do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from corral.core.serving import Catalog, ReplicaState, ServingSnapshot
from corral.engine.effects import Effect


@dataclass(frozen=True)
class ServingEffect(Effect):
    writes: ClassVar[bool] = True  # whether applying it writes to the store (a run is needed for it)

    def about(self, snapshot: ServingSnapshot) -> tuple[int | None, int | None]:
        """The deployment and the replica it is about (None where it is about none)."""
        return None, None


@dataclass(frozen=True)
class _AboutReplica(ServingEffect):
    replica_id: int

    def about(self, snapshot):
        replica = snapshot.replicas.get(self.replica_id)
        return (replica.deployment_id if replica else None), self.replica_id


@dataclass(frozen=True)
class CreateReplicas(ServingEffect):
    """New replicas of a deployment, each with its job; they take the places of replicas on their way out."""

    deployment_id: int
    count: int

    def about(self, snapshot):
        return self.deployment_id, None


@dataclass(frozen=True)
class StopReplica(_AboutReplica):
    """A replica goes TERMINATING (scaled down, its process ended, its deployment destroyed)."""

    moves: ClassVar[Mapping[str, frozenset[str]]] = {"replica": frozenset({ReplicaState.TERMINATING})}

    reason: str


@dataclass(frozen=True)
class CancelJob(_AboutReplica):
    """The job of a TERMINATING replica, still running, is cancelled."""

    job_id: int


@dataclass(frozen=True)
class SetAddress(_AboutReplica):
    """The address a replica serves at, found when its process came up."""

    address: str


@dataclass(frozen=True)
class PublishCatalog(ServingEffect):
    """The live deployments and their healthy endpoints, handed to the router."""

    writes: ClassVar[bool] = False

    catalog: Catalog
