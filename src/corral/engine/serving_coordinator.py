"""Runs the serving handlers and applies what they decided, one transaction per handler run.

The same judgement as the job coordinator (`judge`, declared transitions), applied to
deployments and replicas; the effects a handler returns as data (create, stop, cancel,
addresses, the router's catalog) are applied in the same transaction as its state changes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from sqlalchemy.exc import IntegrityError

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
from corral.engine.cancel import AlreadyEnded, cancel_job
from corral.engine.serving_handlers import ServingDecision, ServingHandler
from corral.engine.target_errors import FailedOn, TargetError, TargetErrors, decide_apart
from corral.metrics import TRANSITIONS
from corral.store.changes import StaleWrite
from corral.store.deployments import count_failed_start, insert_replica, move, read_snapshot, record, set_columns
from corral.store.schema import deployments, replicas
from corral.store.store import Store

log = logging.getLogger("corral.serving")


@dataclass
class ServingReport:
    changed: bool = False
    jobs_changed: bool = False  # replica jobs created or cancelled: the job engine has work
    outcomes: list[Outcome] = field(default_factory=list)
    snapshot: ServingSnapshot | None = None


async def run_serving_handler(store: Store, handler: ServingHandler, now: float, probes: dict[int, Probe],
                              publish: Callable[[Catalog], None] | None = None,
                              errors: TargetErrors | None = None) -> ServingReport:
    """One run. A deployment or replica it fails on is set aside (see target_errors), the others proceed: it is
    left out of `execute` when that raises about it, and a write about it that fails rolls the run back, which is
    made again without it, so nothing about it is kept half-way."""
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
    async with store.write() as connection:
        snapshot = await read_snapshot(connection, now, probes)
        decision, targets = _decide(handler, snapshot, failed)
        if decision.catalog is not None and publish is not None:
            publish(decision.catalog)
        outcomes = judge(targets, decision.result, handler.transitions, now=now, max_tries=None,
                         is_expired=lambda target, _now: handler.is_stale(target, snapshot))
        report = ServingReport(outcomes=outcomes, snapshot=snapshot)
        owner = _owner(handler, snapshot)
        for outcome in outcomes:
            TRANSITIONS.labels(handler.name, outcome.result).inc()
            async with _about(outcome.target.id):
                report.changed |= await _apply(connection, handler, outcome, snapshot, now)
        for replica_id, address in decision.addresses.items():
            async with _about(owner(replica_id)):
                await set_columns(connection, replicas, replica_id, address=address)
        for replica_id, reason in decision.stop.items():
            async with _about(owner(replica_id)):
                replica = snapshot.replicas[replica_id]
                reason += await _leaving(connection, replica, now)
                await move(connection, replicas, replica_id, replica.state, ReplicaState.TERMINATING, now,
                           reason=reason)
                await record(connection, now, replica.deployment_id, replica_id, handler.name, "SUCCESS",
                             replica.state, ReplicaState.TERMINATING, reason)
            report.changed = True
        for deployment_id, count in decision.create.items():
            async with _about(deployment_id if handler.entity == "deployment" else None):
                gone = leaving(snapshot, deployment_id)
                for index in range(count):
                    await insert_replica(connection, deployment_id, snapshot.deployments[deployment_id].spec, now,
                                         gone[index] if index < len(gone) else None)
            report.changed = report.jobs_changed = True
        for job_id in decision.cancel_jobs:
            try:
                await cancel_job(connection, job_id, now)
            except AlreadyEnded:
                continue
            report.changed = report.jobs_changed = True
        for target_id, error in errors.report(handler.name, failed, handler.entity, give_up_after=None).items():
            if error.first:
                report.changed |= await _record_set_aside(connection, handler, snapshot, target_id, error, now)
        return report


def _decide(handler: ServingHandler, snapshot: ServingSnapshot, failed: dict) -> tuple[ServingDecision, list]:
    targets = [t for t in _targets(handler, snapshot) if t.id not in failed]
    return decide_apart(lambda some: handler.execute(some, snapshot), targets, lambda t: t.id, failed)


def _owner(handler: ServingHandler, snapshot: ServingSnapshot) -> Callable[[int], int | None]:
    """The target a replica's effect is about: the replica, or for a deployment handler its deployment."""
    if handler.entity == "replica":
        return lambda replica_id: replica_id
    return lambda replica_id: replica.deployment_id if (replica := snapshot.replicas.get(replica_id)) else None


@asynccontextmanager
async def _about(target_id: int | None):
    """A write about one target: if it fails, that target is set aside (None: the run fails as a whole)."""
    try:
        yield
    except (StaleWrite, IntegrityError):
        raise  # the store moved under the run: read again, as for any run
    except Exception as error:
        if target_id is None:
            raise
        raise FailedOn(target_id, error) from error


async def _record_set_aside(connection, handler: ServingHandler, snapshot: ServingSnapshot, target_id: int,
                            error: TargetError, now: float) -> bool:
    if handler.entity == "deployment":
        facts, deployment_id, replica_id = snapshot.deployments.get(target_id), target_id, None
    else:
        facts = snapshot.replicas.get(target_id)
        deployment_id, replica_id = (facts.deployment_id if facts else None), target_id
    if facts is None:
        return False
    await record(connection, now, deployment_id, replica_id, handler.name, "SKIPPED", facts.state, None,
                 error.note(handler.name))
    return True


async def _leaving(connection, replica: ReplicaFacts, now: float) -> str:
    """Count a replica that leaves before it served against its deployment; what its event adds to say so."""
    if not replica.failed_start:
        return ""
    failed = await count_failed_start(connection, replica.deployment_id, now)
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
    if decision.catalog is not None and publish is not None:
        publish(decision.catalog)
    if failed or decision.create or decision.stop or decision.cancel_jobs or decision.addresses:
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


async def _apply(connection, handler: ServingHandler, outcome: Outcome, snapshot: ServingSnapshot,
                 now: float) -> bool:
    """Write the outcome's state change with its history record; outcomes that change nothing leave no record."""
    target, new = outcome.target, _new_state(handler, outcome)
    if handler.entity == "deployment":
        table, deployment_id, replica_id = deployments, target.id, None
    else:
        table, deployment_id, replica_id = replicas, snapshot.replicas[target.id].deployment_id, target.id
    if new is None or new == target.state:
        return False
    columns, note = {"finished_at": now} if new is DeploymentState.DESTROYED else {}, outcome.note
    if replica_id is not None:
        replica = snapshot.replicas[replica_id]
        if new is ReplicaState.HEALTHY and not replica.served:
            columns["healthy_at"] = now
            if snapshot.deployments[deployment_id].failed_starts:
                await set_columns(connection, deployments, deployment_id, failed_starts=0, failed_start_at=None)
        elif new is ReplicaState.TERMINATING:
            note = (note or "") + await _leaving(connection, replica, now)
    await move(connection, table, target.id, target.state, new, now, **columns)
    await record(connection, now, deployment_id, replica_id, handler.name, outcome.result, target.state, new, note)
    log.info("%s %s: %s -> %s (%s%s)", handler.entity, target.id, target.state, new, handler.name,
             f": {note}" if note else "")
    return True

