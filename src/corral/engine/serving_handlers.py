"""The deployment and replica handlers of the lifecycle engine (DESIGN.md, Serving), as data plus pure code.

They run on the same engine as the job handlers: each names the states it acts on, declares
its transitions as `StatusTransitions`, and decides in memory over a snapshot; `judge` turns
the result into outcomes. Deployments have SUCCESS / FAILURE outcomes and replicas SUCCESS /
FAILURE / STALE: here FAILURE is the engine's NEED_RETRY (no try limit, so never GIVE_UP) and
STALE is EXPIRED, judged by each handler's own `is_stale`. What a handler asks of the world
beyond a state change (create replicas, stop them, cancel a replica's job, publish the healthy
endpoints) it returns as typed effects (corral.engine.serving_effects) in its `ServingDecision`,
declared in its `effects`; the serving coordinator applies each by its type.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from corral.core.lifecycle import HandlerResult, StatusTransitions, TransitionStatus
from corral.core.serving import (
    REPLICA_COUNTED,
    Catalog,
    DeploymentState,
    Endpoint,
    Probe,
    ReplicaFacts,
    ReplicaState,
    ServingSnapshot,
    ServingTarget,
)
from corral.core.states import JobState, TaskState
from corral.engine.effects import effect_moves
from corral.engine.serving_effects import (
    CancelJob,
    CreateReplicas,
    PublishCatalog,
    ServingEffect,
    SetAddress,
    StopReplica,
)

D, R = DeploymentState, ReplicaState
E = TypeVar("E", bound=ServingEffect)


@dataclass
class ServingDecision:
    result: HandlerResult
    effects: list[ServingEffect] = field(default_factory=list)

    def of(self, kind: type[E]) -> list[E]:
        return [effect for effect in self.effects if isinstance(effect, kind)]


class ServingHandler:
    name: str = ""
    entity: str = "replica"  # or "deployment": whose ids the targets are
    states: frozenset[str] = frozenset()
    transitions: StatusTransitions = StatusTransitions()
    effects: tuple[type[ServingEffect], ...] = ()  # the kinds of effect its decisions may carry

    @property
    def effect_moves(self) -> dict[str, frozenset[str]]:
        return effect_moves(self.effects)

    def execute(self, targets: Sequence[ServingTarget], snapshot: ServingSnapshot) -> ServingDecision:
        raise NotImplementedError

    def is_stale(self, target: ServingTarget, snapshot: ServingSnapshot) -> bool:
        """STALE: the engine's EXPIRED, for an untouched target."""
        return False


def _deployment(state: DeploymentState | None) -> TransitionStatus | None:
    return TransitionStatus(deployment=state) if state else None


def _replica(state: ReplicaState | None) -> TransitionStatus | None:
    return TransitionStatus(replica=state) if state else None


def _live(replicas: Sequence[ReplicaFacts]) -> list[ReplicaFacts]:
    """Replicas that count towards the wanted number: starting or up, and whose process has not ended."""
    return [r for r in replicas if r.state in REPLICA_COUNTED and not r.process_ended]


# deployments ------------------------------------------------------------------------------


class CheckPendingDeployment(ServingHandler):
    name = "CheckPendingDeployment"
    entity = "deployment"
    states = frozenset({D.PENDING})
    transitions = StatusTransitions(success=_deployment(D.SCALING))

    def execute(self, targets, snapshot):
        return ServingDecision(HandlerResult(successes=[t.key for t in targets]))


# Which replicas go first when scaling down: the broken, the unfinished, then the newest healthy.
_STOP_ORDER = {R.FAILED_TO_START: 0, R.UNHEALTHY: 1, R.PROVISIONING: 2, R.DEGRADED: 3, R.HEALTHY: 4}


class ScalingDeployment(ServingHandler):
    """Creates or stops replicas until the live ones match the wanted number; replaces ended ones."""

    name = "ScalingDeployment"
    entity = "deployment"
    states = frozenset({D.SCALING})
    transitions = StatusTransitions(success=_deployment(D.READY))
    effects = (CreateReplicas, StopReplica)

    def execute(self, targets, snapshot):
        decision = ServingDecision(HandlerResult())
        for target in targets:
            facts = snapshot.deployments[target.id]
            replicas = snapshot.replicas_of(target.id)
            ended = [r for r in replicas if r.state in REPLICA_COUNTED and r.process_ended]
            decision.effects += [StopReplica(replica.id, "its process ended") for replica in ended]
            live = _live(replicas)
            missing = facts.replicas - len(live)
            if missing > 0:
                failed = sum(r.failed_start for r in ended)
                if snapshot.now < facts.next_start_at(failed, snapshot.now):
                    continue  # replicas keep failing to start: stays SCALING until the backoff has passed
                decision.effects.append(CreateReplicas(target.id, missing))
            for replica in sorted(live, key=lambda r: (_STOP_ORDER[r.state], -r.created_at))[:max(-missing, 0)]:
                decision.effects.append(StopReplica(replica.id, f"scaled down to {facts.replicas}"))
            decision.result.successes.append(target.key)
            decision.result.notes[target.key] = f"{len(live)} -> {facts.replicas} replicas"
        return decision


class CheckReplicaDeployment(ServingHandler):
    """A READY deployment whose live replica count differs from the wanted one scales again."""

    name = "CheckReplicaDeployment"
    entity = "deployment"
    states = frozenset({D.READY})
    transitions = StatusTransitions(success=_deployment(D.SCALING))

    def execute(self, targets, snapshot):
        result = HandlerResult()
        for target in targets:
            live = len(_live(snapshot.replicas_of(target.id)))
            wanted = snapshot.deployments[target.id].replicas
            if live != wanted:
                result.successes.append(target.key)
                result.notes[target.key] = f"{live} live replicas, {wanted} wanted"
        return ServingDecision(result)


class ReconcileDeployment(ServingHandler):
    """A READY deployment with a replica whose process ended (the replica and its task disagree) rescales."""

    name = "ReconcileDeployment"
    entity = "deployment"
    states = frozenset({D.READY})
    transitions = StatusTransitions(need_retry=_deployment(D.SCALING))

    def execute(self, targets, snapshot):
        result = HandlerResult()
        for target in targets:
            ended = [r.id for r in snapshot.replicas_of(target.id) if r.state in REPLICA_COUNTED and r.process_ended]
            if ended:
                result.failures.append(target.key)
                result.notes[target.key] = f"replica(s) {ended} no longer run"
        return ServingDecision(result)


class DestroyingDeployment(ServingHandler):
    """Stops every replica of the deployment; it is DESTROYED once none is left."""

    name = "DestroyingDeployment"
    entity = "deployment"
    states = frozenset({D.DESTROYING})
    transitions = StatusTransitions(success=_deployment(D.DESTROYED), need_retry=_deployment(D.DESTROYED))
    effects = (StopReplica,)

    def execute(self, targets, snapshot):
        decision = ServingDecision(HandlerResult())
        for target in targets:
            replicas = snapshot.replicas_of(target.id)
            for replica in replicas:
                if replica.state is not R.TERMINATING:
                    decision.effects.append(StopReplica(replica.id, "deployment destroyed"))
            if not replicas:
                decision.result.successes.append(target.key)
        return decision


# replicas ---------------------------------------------------------------------------------


class ProvisioningReplica(ServingHandler):
    """A replica's task runs with a port: DEGRADED until its health check passes; its job ended first: failed."""

    name = "ProvisioningReplica"
    states = frozenset({R.PROVISIONING})
    transitions = StatusTransitions(success=_replica(R.DEGRADED), need_retry=_replica(R.FAILED_TO_START))
    effects = (SetAddress,)

    def execute(self, targets, snapshot):
        decision = ServingDecision(HandlerResult())
        for target in targets:
            replica = snapshot.replicas[target.id]
            if replica.process_ended:
                decision.result.failures.append(target.key)
                decision.result.notes[target.key] = f"its job ended {replica.job_state} before it served"
            elif replica.task_state is TaskState.RUNNING and replica.address:
                decision.result.successes.append(target.key)
                decision.effects.append(SetAddress(target.id, replica.address))
                decision.result.notes[target.key] = f"running at {replica.address}"
        return decision


class HealthCheckReplica(ServingHandler):
    """Reads the prober's results: passing is HEALTHY; `threshold` failures in a row is UNHEALTHY.

    A new (DEGRADED) replica's failures count only after its startup timeout: it may be loading
    a model. A result older than three intervals is STALE: the replica is DEGRADED until probed.
    """

    name = "HealthCheckReplica"
    states = frozenset({R.HEALTHY, R.UNHEALTHY, R.DEGRADED})
    transitions = StatusTransitions(success=_replica(R.HEALTHY), need_retry=_replica(R.UNHEALTHY),
                                    expired=_replica(R.DEGRADED))

    def execute(self, targets, snapshot):
        result = HandlerResult()
        for target in targets:
            replica = snapshot.replicas[target.id]
            probe = snapshot.probes.get(target.id)
            if replica.process_ended or probe is None or self._stale(probe, replica, snapshot):
                continue  # a stale or missing result is judged by is_stale
            health = snapshot.spec_of(replica).health
            loading = replica.state is R.DEGRADED and snapshot.now - replica.since < health.startup_timeout
            if probe.ok:
                result.successes.append(target.key)
            elif probe.failures >= health.threshold and not loading:
                result.failures.append(target.key)
                result.notes[target.key] = probe.cause
        return ServingDecision(result)

    def is_stale(self, target, snapshot):
        replica = snapshot.replicas[target.id]
        probe = snapshot.probes.get(target.id)
        if replica.state is R.DEGRADED or replica.process_ended:
            return False
        return self._stale(probe, replica, snapshot)

    @staticmethod
    def _stale(probe: Probe | None, replica: ReplicaFacts, snapshot: ServingSnapshot) -> bool:
        """No result within three intervals (counted from its last state change when never probed, as after a
        controller restart)."""
        health = snapshot.spec_of(replica).health
        last = probe.at if probe is not None else replica.since
        return snapshot.now - last > 3 * health.interval + health.timeout


class RunningReplica(ServingHandler):
    """A replica whose process ended, or that failed to start, is on its way out."""

    name = "RunningReplica"
    states = frozenset({R.DEGRADED, R.HEALTHY, R.UNHEALTHY, R.FAILED_TO_START})
    transitions = StatusTransitions(need_retry=_replica(R.TERMINATING))

    def execute(self, targets, snapshot):
        result = HandlerResult()
        for target in targets:
            replica = snapshot.replicas[target.id]
            if replica.state is R.FAILED_TO_START or replica.process_ended:
                result.failures.append(target.key)
                result.notes[target.key] = f"its job is {replica.job_state}"
        return ServingDecision(result)


class ReplicaEviction(ServingHandler):
    """An UNHEALTHY replica that has not recovered within one more failure window is evicted."""

    name = "ReplicaEviction"
    states = frozenset({R.UNHEALTHY})
    transitions = StatusTransitions(success=_replica(R.TERMINATING))

    def execute(self, targets, snapshot):
        result = HandlerResult()
        for target in targets:
            health = snapshot.spec_of(snapshot.replicas[target.id]).health
            if snapshot.now - target.since >= health.interval * health.threshold:
                probe = snapshot.probes.get(target.id)
                result.successes.append(target.key)
                result.notes[target.key] = "evicted, to be replaced" + (f": {probe.cause}" if probe else "")
        return ServingDecision(result)


class TerminatingReplica(ServingHandler):
    """Cancels the replica's job; the replica is TERMINATED once its worker confirmed the exit."""

    name = "TerminatingReplica"
    states = frozenset({R.TERMINATING})
    transitions = StatusTransitions(success=_replica(R.TERMINATED))
    effects = (CancelJob,)

    def execute(self, targets, snapshot):
        decision = ServingDecision(HandlerResult())
        for target in targets:
            replica = snapshot.replicas[target.id]
            if replica.process_ended:
                decision.result.successes.append(target.key)
            elif replica.job_state not in (JobState.TERMINATING,):
                decision.effects.append(CancelJob(target.id, replica.job_id))
        return decision


class ServiceDiscoverySync(ServingHandler):
    """Publishes the HEALTHY replicas of each live deployment to the router. Changes no state."""

    name = "ServiceDiscoverySync"
    states = frozenset({R.HEALTHY})
    effects = (PublishCatalog,)

    def execute(self, targets, snapshot):
        live = {facts.name: facts for facts in snapshot.deployments.values()
                if facts.state is not D.DESTROYING}
        endpoints: dict[str, list[Endpoint]] = {name: [] for name in live}
        for target in targets:
            replica = snapshot.replicas[target.id]
            facts = snapshot.deployments[replica.deployment_id]
            if facts.name in endpoints and replica.address and not replica.process_ended:
                endpoints[facts.name].append(Endpoint(replica.id, replica.address))
        catalog = Catalog(live, {name: tuple(found) for name, found in endpoints.items()})
        return ServingDecision(HandlerResult(), [PublishCatalog(catalog)])


# The order a pass runs them in: replicas settle first, so the deployments count them as they are.
REPLICA_HANDLERS: tuple[ServingHandler, ...] = (
    ProvisioningReplica(),
    HealthCheckReplica(),
    RunningReplica(),
    ReplicaEviction(),
    TerminatingReplica(),
    ServiceDiscoverySync(),
)
DEPLOYMENT_HANDLERS: tuple[ServingHandler, ...] = (
    CheckPendingDeployment(),
    ReconcileDeployment(),
    CheckReplicaDeployment(),
    ScalingDeployment(),
    DestroyingDeployment(),
)
SERVING_HANDLERS = REPLICA_HANDLERS + DEPLOYMENT_HANDLERS
