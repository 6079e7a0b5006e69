"""Runs the serving handlers and applies what they decided: one transaction and one ChangeSet per handler run.

The same judgement as the job coordinator (`judge`, declared transitions), applied to deployments
and replicas. Every state change, column update and history record of a run goes through one
ChangeSet, checked against the deployment and replica tables and flushed once; what a handler asks
beyond its moves is typed effects (corral.engine.serving_effects), each carried out by the applier
registered for its type. A deployment or replica whose changes fail, a move the tables refuse
included, is set aside with the cause on record and the others proceed; under CORRAL_STRICT_MOVES=1
(the test suite) a refused move raises instead.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from corral.core.crash_loop import replacement_delay
from corral.core.lifecycle import Outcome, judge
from corral.core.serving import (
    REPLICA_COUNTED,
    REPLICA_LEAVING,
    Catalog,
    DeploymentState,
    Probe,
    ReplicaFacts,
    ReplicaState,
    ServingSnapshot,
    ServingTarget,
)
from corral.core.states import IllegalTransition
from corral.engine import coordinator
from corral.engine.cancel import AlreadyEnded, cancel
from corral.engine.serving_effects import (
    CancelJob,
    CreateReplicas,
    PublishCatalog,
    ServingEffect,
    SetAddress,
    StopReplica,
)
from corral.engine.serving_handlers import ServingDecision, ServingHandler
from corral.engine.target_errors import FailedOn, TargetError, TargetErrors, decide_apart
from corral.metrics import TRANSITIONS
from corral.store.changes import ChangeSet, StaleWrite
from corral.store.database import Conflict
from corral.store.deployments import count_failed_start, count_repeats, insert_replica, read_snapshot
from corral.store.store import Store

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

log = logging.getLogger("corral.serving")


@dataclass
class ServingReport:
    changed: bool = False
    jobs_changed: bool = False  # replica jobs created or cancelled: the job engine has work
    outcomes: list[Outcome] = field(default_factory=list)
    snapshot: ServingSnapshot | None = None


@dataclass
class _Run:
    """What an applier reads of the run, and the set it adds its changes to."""

    connection: AsyncConnection
    changes: ChangeSet
    handler: ServingHandler
    snapshot: ServingSnapshot
    publish: Callable[[Catalog], None] | None
    report: ServingReport


async def run_serving_handler(store: Store, handler: ServingHandler, now: float, probes: dict[int, Probe],
                              publish: Callable[[Catalog], None] | None = None,
                              errors: TargetErrors | None = None) -> ServingReport:
    """One run. A deployment or replica it fails on is set aside (see target_errors), the others proceed: it is
    left out of `execute` when that raises about it, and a change about it that fails rolls the run back, which
    is made again without it, so nothing about it is kept half-way."""
    errors = errors or TargetErrors()
    failed: dict[int, BaseException] = {}
    while True:
        try:
            return await _run(store, handler, now, probes, publish, errors, failed)
        except FailedOn as failure:
            if failure.target in failed:  # left out, and still written about: not the target's doing
                raise failure.error from None
            failed[failure.target] = failure.error


async def _run(store: Store, handler: ServingHandler, now: float, probes: dict[int, Probe],
               publish: Callable[[Catalog], None] | None, errors: TargetErrors, failed: dict) -> ServingReport:
    async with store.write(handler.name) as connection:
        snapshot = await read_snapshot(connection, now, probes)
        decision, targets = _decide(handler, snapshot, failed)
        outcomes = judge(targets, decision.result, handler.transitions, now=now, max_tries=None,
                         is_expired=lambda target, _now: handler.is_stale(target, snapshot))
        report = ServingReport(outcomes=outcomes, snapshot=snapshot)
        run = _Run(connection, ChangeSet(now), handler, snapshot, publish, report)
        for outcome in outcomes:
            TRANSITIONS.labels(handler.name, outcome.result).inc()
            async with _about(outcome.target.id):
                await _apply(run, outcome)
        for kind, apply in SERVING_APPLIERS.items():
            for effect in decision.of(kind):
                async with _about(_target_of(effect, handler, snapshot)):
                    await apply(run, effect)
        await _set_aside(run, errors.report(handler.name, failed, handler.entity, give_up_after=None))
        await run.changes.flush(connection)
        report.changed |= run.changes.moved
        return report


def _decide(handler: ServingHandler, snapshot: ServingSnapshot, failed: dict) -> tuple[ServingDecision, list]:
    targets = [t for t in _targets(handler, snapshot) if t.id not in failed]
    decision, targets = decide_apart(lambda some: handler.execute(some, snapshot), targets, lambda t: t.id, failed)
    undeclared = [e for e in decision.effects if not isinstance(e, handler.effects)]
    if undeclared:
        raise TypeError(f"{handler.name} does not declare the effects {undeclared}")
    return decision, targets


def _target_of(effect: ServingEffect, handler: ServingHandler, snapshot: ServingSnapshot) -> int | None:
    """The target an effect is about: its replica, or for a deployment handler its deployment."""
    deployment_id, replica_id = effect.about(snapshot)
    return replica_id if handler.entity == "replica" else deployment_id


@asynccontextmanager
async def _about(target_id: int | None):
    """Changes about one target: if they fail, that target is set aside (None: the run fails as a whole). A move the
    tables refuse is set aside too, but raises under CORRAL_STRICT_MOVES=1."""
    try:
        yield
    except (StaleWrite, Conflict):
        raise  # the store moved under the run: read again, as for any run
    except Exception as error:
        if target_id is None or coordinator.STRICT and isinstance(error, IllegalTransition):
            raise
        raise FailedOn(target_id, error) from error


async def _set_aside(run: _Run, errors: dict[int, TargetError]) -> None:
    """Every run that sets a target aside is on record: the first of a streak, or a new cause, is a new record; the
    same cause again is counted on that record (a row per cause, not per pass)."""
    handler, snapshot = run.handler, run.snapshot
    found: list[tuple[tuple[int, int | None], str, str, bool]] = []  # (deployment, replica), state, note, first
    for target_id, error in errors.items():
        if handler.entity == "deployment":
            facts, about = snapshot.deployments.get(target_id), (target_id, None)
        else:
            facts = snapshot.replicas.get(target_id)
            about = (facts.deployment_id if facts else None, target_id)
        if facts is not None:
            found.append((about, facts.state, error.note(handler.name), error.first))
    repeated = {about: note for about, _, note, first in found if not first}
    counted = await count_repeats(run.connection, handler.name, repeated, run.changes.now)
    for (deployment_id, replica_id), state, note, _ in found:
        if (deployment_id, replica_id) not in counted:
            run.changes.record_serving(deployment_id, replica_id, handler.name, "SKIPPED", state, None, note)


async def _leaving(run: _Run, replica: ReplicaFacts) -> str:
    """Count a replica that leaves before it served against its deployment; what its event adds to say so."""
    if not replica.failed_start:
        return ""
    failed = await count_failed_start(run.connection, replica.deployment_id, run.changes.now)
    return f"; {failed} replica(s) in a row ended before serving: the next starts after {replacement_delay(failed):g}s"


def leaving(snapshot: ServingSnapshot, deployment_id: int) -> list[int]:
    """The deployment's replicas on their way out (stopping, failed to start, their process ended), oldest
    first: those new replicas take the place of, as their events say."""
    return sorted(r.id for r in snapshot.replicas_of(deployment_id)
                  if r.state in REPLICA_LEAVING or (r.state in REPLICA_COUNTED and r.process_ended))


def would_act(handler: ServingHandler, snapshot: ServingSnapshot,
              publish: Callable[[Catalog], None] | None = None) -> bool:
    """Whether a run on this snapshot would change anything; what it would publish is published now.

    The pass uses it to skip the write transaction of every handler with nothing to do.
    """
    failed: dict = {}
    decision, targets = _decide(handler, snapshot, failed)
    if publish is not None:
        for effect in decision.of(PublishCatalog):
            publish(effect.catalog)
    if failed or any(effect.writes for effect in decision.effects):
        return True  # a target it fails on: the run sets it aside and says so
    outcomes = judge(targets, decision.result, handler.transitions, now=snapshot.now, max_tries=None,
                     is_expired=lambda target, _now: handler.is_stale(target, snapshot))
    return any(_new_state(handler, o) not in (None, o.target.state) for o in outcomes)


def _new_state(handler: ServingHandler, outcome: Outcome) -> str | None:
    transition = outcome.transition
    if transition is None:
        return None
    return transition.deployment if handler.entity == "deployment" else transition.replica


def _targets(handler: ServingHandler, snapshot: ServingSnapshot) -> list[ServingTarget]:
    facts = snapshot.deployments if handler.entity == "deployment" else snapshot.replicas
    return [ServingTarget(f.id, f.state, f.since) for f in facts.values() if f.state in handler.states]


async def _apply(run: _Run, outcome: Outcome) -> None:
    """Add the outcome's state change, with its history record; outcomes that change nothing leave no record."""
    handler, changes = run.handler, run.changes
    target, new, note = outcome.target, _new_state(handler, outcome), outcome.note
    if new is None or new == target.state:
        return
    if handler.entity == "deployment":
        columns = {"finished_at": changes.now} if new is DeploymentState.DESTROYED else {}
        changes.deployment(target.id, target.state, new, handler=handler.name, result=outcome.result, message=note,
                           **columns)
    else:
        replica, columns = run.snapshot.replicas[target.id], {}
        if new is ReplicaState.HEALTHY and not replica.served:
            columns = {"healthy_at": changes.now}
            deployment = run.snapshot.deployments[replica.deployment_id]
            if deployment.failed_starts:
                changes.deployment_columns(deployment.id, deployment.state, failed_starts=0, failed_start_at=None)
        elif new is ReplicaState.TERMINATING:
            note = (note or "") + await _leaving(run, replica)
        changes.replica(target.id, replica.deployment_id, target.state, new, handler=handler.name,
                        result=outcome.result, message=note, **columns)
    log.info("%s %s: %s -> %s (%s%s)", handler.entity, target.id, target.state, new, handler.name,
             f": {note}" if note else "")


# --- the appliers of effects, by type -------------------------------------------------------------------


async def _publish(run: _Run, effect: PublishCatalog) -> None:
    if run.publish is not None:
        run.publish(effect.catalog)


async def _set_address(run: _Run, effect: SetAddress) -> None:
    run.changes.replica_columns(effect.replica_id, run.snapshot.replicas[effect.replica_id].state,
                                address=effect.address)


async def _stop(run: _Run, effect: StopReplica) -> None:
    replica = run.snapshot.replicas[effect.replica_id]
    reason = effect.reason + await _leaving(run, replica)
    run.changes.replica(replica.id, replica.deployment_id, replica.state, ReplicaState.TERMINATING,
                        handler=run.handler.name, message=reason, reason=reason)


async def _create(run: _Run, effect: CreateReplicas) -> None:
    """New replicas, each taking the place of one on its way out (oldest first) while there are such."""
    gone = leaving(run.snapshot, effect.deployment_id)
    spec = run.snapshot.deployments[effect.deployment_id].spec
    for index in range(effect.count):
        await insert_replica(run.connection, run.changes, effect.deployment_id, spec, run.handler.name,
                             gone[index] if index < len(gone) else None)
    run.report.jobs_changed = True


async def _cancel(run: _Run, effect: CancelJob) -> None:
    try:
        await cancel(run.connection, run.changes, effect.job_id)
    except AlreadyEnded:
        return
    run.report.jobs_changed = True


# In the order they are applied: the catalog first (the router learns at once), new replicas after the stops
# whose places they take.
SERVING_APPLIERS: dict[type[ServingEffect], Callable[[_Run, ServingEffect], Awaitable[None]]] = {
    PublishCatalog: _publish, SetAddress: _set_address, StopReplica: _stop, CreateReplicas: _create,
    CancelJob: _cancel}
