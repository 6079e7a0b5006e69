"""Reads of deployments and replicas, their creation, and a user's changes to them, written through a ChangeSet."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

from sqlalchemy import and_, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.deployment_spec import DeploymentSpec
from corral.core.events import REPLACEMENT
from corral.core.keys import key_hash
from corral.core.serving import (
    DEPLOYMENT_LIVE,
    DeploymentFacts,
    DeploymentState,
    Probe,
    ReplicaFacts,
    ReplicaState,
    ServingSnapshot,
)
from corral.core.states import TASK_HOLDS_RESOURCES, Fact, JobState, TaskState
from corral.core.wire import STORED
from corral.store.changes import ChangeSet
from corral.store.jobs import insert_job
from corral.store.project_tokens import token_hashes
from corral.store.schema import deployments, history, jobs, replicas, tasks, workers

D, R = DeploymentState, ReplicaState
SHOWN = (*DEPLOYMENT_LIVE, D.DESTROYING)


class NameTaken(ValueError):
    pass


def deployment_facts(row) -> DeploymentFacts:
    return DeploymentFacts(row.id, row.name, DeploymentSpec.model_validate(row.spec, context=STORED),
                           DeploymentState(row.state),
                           row.state_since, row.replicas, tuple(row.key_hashes or ()),
                           failed_starts=row.failed_starts, failed_start_at=row.failed_start_at)


async def read_snapshot(connection: AsyncConnection, now: float, probes: dict[int, Probe]) -> ServingSnapshot:
    """Live and destroying deployments with their project's token hashes, and their replicas not yet TERMINATED
    with their job's and task's state."""
    snapshot = ServingSnapshot(now, probes=dict(probes))
    shown = [deployment_facts(row) for row in (await connection.execute(
        select(deployments).where(deployments.c.state.in_([str(s) for s in SHOWN])))).all()]
    tokens = await token_hashes(connection, (facts.spec.project for facts in shown))
    for facts in shown:
        hashes = tokens.get(facts.spec.project, ())
        snapshot.deployments[facts.id] = dataclasses.replace(facts, project_key_hashes=hashes)
    rows = (await connection.execute(
        select(replicas, jobs.c.state.label("job_state"), tasks.c.state.label("task_state"), tasks.c.port,
               workers.c.address.label("host"))
        .select_from(replicas.join(jobs, replicas.c.job_id == jobs.c.id)
                     .outerjoin(tasks, and_(tasks.c.job_id == jobs.c.id, tasks.c.index == 0))
                     .outerjoin(workers, tasks.c.worker_id == workers.c.id))
        .where(replicas.c.state != R.TERMINATED,
               replicas.c.deployment_id.in_(list(snapshot.deployments)))
    )).all()
    for row in rows:
        address = row.address or (f"{row.host}:{row.port}" if row.host and row.port else None)
        snapshot.replicas[row.id] = ReplicaFacts(
            row.id, row.deployment_id, ReplicaState(row.state), row.state_since, row.job_id, JobState(row.job_state),
            TaskState(row.task_state) if row.task_state else None, address, row.created_at, row.healthy_at is not None)
    return snapshot


async def insert_deployment(connection: AsyncConnection, spec: DeploymentSpec, keys: list[str], now: float,
                            owner: str = "admin") -> int:
    if await live_deployment(connection, spec.name) is not None:
        raise NameTaken(f"a deployment named {spec.name!r} already exists (undeploy it first)")
    deployment_id = (await connection.execute(insert(deployments).values(
        name=spec.name, spec=spec.model_dump(mode="json"), state=D.PENDING, state_since=now, tries=0,
        replicas=spec.initial_replicas, key_hashes=[key_hash(k) for k in keys], created_at=now, owner=owner,
    ).returning(deployments.c.id))).scalar_one()
    changes = ChangeSet(now)
    changes.record_serving(deployment_id, None, "Deploy", "SUCCESS", None, D.PENDING,
                           f"{spec.initial_replicas} replica(s) wanted")
    await changes.flush(connection)
    return deployment_id


async def live_deployment(connection: AsyncConnection, name: str):
    return (await connection.execute(select(deployments).where(
        deployments.c.name == name, deployments.c.state.in_([str(s) for s in SHOWN])))).first()


async def insert_replica(connection: AsyncConnection, changes: ChangeSet, deployment_id: int, spec: DeploymentSpec,
                         handler: str, replaces: int | None = None) -> int:
    """A new replica and its job (its creation is no move: its record goes to `changes`); `replaces`: the replica
    on its way out whose place it takes."""
    owner = (await connection.execute(select(deployments.c.owner).where(deployments.c.id == deployment_id))).scalar()
    job_id = await insert_job(connection, spec.replica_job(), None, changes.now, owner=owner or "admin")
    replica_id = (await connection.execute(insert(replicas).values(
        deployment_id=deployment_id, job_id=job_id, state=R.PROVISIONING, state_since=changes.now,
        created_at=changes.now,
    ).returning(replicas.c.id))).scalar_one()
    result, note = ("SUCCESS", "") if replaces is None else (REPLACEMENT, f" in place of replica {replaces}")
    changes.record_serving(deployment_id, replica_id, handler, result, None, R.PROVISIONING,
                           f"created as job {job_id}{note}")
    return replica_id


async def count_failed_start(connection: AsyncConnection, deployment_id: int, now: float) -> int:
    """One more replica of the deployment ended before it served; returns how many in a row now."""
    return (await connection.execute(
        update(deployments).where(deployments.c.id == deployment_id)
        .values(failed_starts=deployments.c.failed_starts + 1, failed_start_at=now)
        .returning(deployments.c.failed_starts))).scalar_one()


async def count_repeats(connection: AsyncConnection, handler: str, notes: dict[tuple[int, int | None], str],
                        now: float) -> set[tuple[int, int | None]]:
    """One more sighting on the latest SKIPPED record of `handler` about each (deployment, replica) whose message is
    still the note; returns those counted (the others need a record of their own)."""
    if not notes:
        return set()
    latest = (await connection.execute(
        select(func.max(history.c.id))
        .where(history.c.deployment_id.in_({deployment for deployment, _ in notes}), history.c.handler == handler,
               history.c.result == "SKIPPED")
        .group_by(history.c.deployment_id, history.c.replica_id)
    )).scalars().all()
    rows = (await connection.execute(
        select(history.c.id, history.c.deployment_id, history.c.replica_id, history.c.message)
        .where(history.c.id.in_(latest))
    )).all()
    counted = {row.id: (row.deployment_id, row.replica_id) for row in rows
               if notes.get((row.deployment_id, row.replica_id)) == row.message}
    if counted:
        await connection.execute(update(history).where(history.c.id.in_(list(counted)))
                                 .values(repeats=history.c.repeats + 1, last_at=now))
    return set(counted.values())


class NoSuchDeployment(LookupError):
    pass


async def scale_deployment(connection: AsyncConnection, name: str, wanted: int, reason: str, now: float) -> int:
    """Set the replicas a live deployment wants (0 scales it to zero); returns what it wanted before."""
    row = await live_deployment(connection, name)
    if row is None or row.state == D.DESTROYING:
        raise NoSuchDeployment(f"no live deployment named {name!r}")
    spec = DeploymentSpec.model_validate(row.spec, context=STORED)
    if wanted > spec.max_replicas:
        raise ValueError(f"{name} allows at most {spec.max_replicas} replicas (asked for {wanted})")
    if wanted != row.replicas:
        changes = ChangeSet(now)
        changes.deployment_columns(row.id, D(row.state), replicas=wanted)
        changes.record_serving(row.id, None, "Scale", "SUCCESS", row.state, row.state,
                               f"{row.replicas} -> {wanted} replicas: {reason}")
        await changes.flush(connection)
    return row.replicas


async def destroy_deployment(connection: AsyncConnection, name: str, now: float) -> None:
    row = await live_deployment(connection, name)
    if row is None:
        raise NoSuchDeployment(f"no live deployment named {name!r}")
    if row.state == D.DESTROYING:
        return
    changes = ChangeSet(now)
    changes.deployment(row.id, D(row.state), D.DESTROYING, handler=Fact.UNDEPLOY, message="undeployed by a user",
                       replicas=0)
    await changes.flush(connection)


async def add_key(connection: AsyncConnection, name: str, key: str, now: float) -> None:
    row = await live_deployment(connection, name)
    if row is None:
        raise NoSuchDeployment(f"no live deployment named {name!r}")
    changes = ChangeSet(now)
    changes.deployment_columns(row.id, D(row.state), key_hashes=[*(row.key_hashes or []), key_hash(key)])
    await changes.flush(connection)


async def deployment_rows(connection: AsyncConnection, shown_only: bool = True, limit: int | None = None,
                          projects: Collection[str] | None = None) -> list:
    """Full `deployments` rows, newest first: those SHOWN, or with `shown_only` false every one ever made; with
    `projects`, of those projects only."""
    query = select(deployments).order_by(deployments.c.id.desc())
    if projects is not None:
        query = query.where(deployments.c.spec["project"].as_string().in_(sorted(projects)))
    if shown_only:
        query = query.where(deployments.c.state.in_([str(s) for s in SHOWN]))
    if limit is not None:
        query = query.limit(limit)
    return list((await connection.execute(query)).all())


async def newest_named(connection: AsyncConnection, name: str):
    """The newest deployment of this name, destroyed or not, or None."""
    return (await connection.execute(select(deployments).where(deployments.c.name == name)
                                     .order_by(deployments.c.id.desc()).limit(1))).first()


async def any_shown(connection: AsyncConnection) -> bool:
    """Whether any deployment is not destroyed: with none, no router decides where a replica fits."""
    return (await connection.execute(
        select(deployments.c.id).where(deployments.c.state.in_([str(s) for s in SHOWN])).limit(1))).first() is not None


async def name_exists(connection: AsyncConnection, name: str) -> bool:
    """Whether any deployment, destroyed or not, had this name."""
    return (await connection.execute(
        select(deployments.c.id).where(deployments.c.name == name).limit(1))).first() is not None


async def replica_counts(connection: AsyncConnection, ids: list[int]) -> dict[int, dict[str, int]]:
    """For each deployment, how many of its replicas are in each state (one without replicas is left out)."""
    counts: dict[int, dict[str, int]] = {}
    for r in (await connection.execute(
            select(replicas.c.deployment_id, replicas.c.state, func.count().label("n"))
            .where(replicas.c.deployment_id.in_(ids)).group_by(replicas.c.deployment_id, replicas.c.state))).all():
        counts.setdefault(r.deployment_id, {})[r.state] = r.n
    return counts


async def replica_rows(connection: AsyncConnection, deployment_id: int) -> list:
    """Full `replicas` rows of the deployment, oldest first."""
    return list((await connection.execute(
        select(replicas).where(replicas.c.deployment_id == deployment_id).order_by(replicas.c.id))).all())


async def serving_history(connection: AsyncConnection, deployment_id: int, limit: int) -> list:
    """The deployment's latest `limit` history records, oldest first."""
    rows = (await connection.execute(
        select(history).where(history.c.deployment_id == deployment_id)
        .order_by(history.c.id.desc()).limit(limit))).all()
    return list(reversed(rows))


async def replicas_with_workers(connection: AsyncConnection, deployment_ids: list[int]) -> list:
    """The replicas not TERMINATED of these deployments, oldest first, each with the worker of its task 0
    (`worker_id`, `worker_name`; None while unplaced)."""
    return list((await connection.execute(
        select(replicas, tasks.c.worker_id, workers.c.name.label("worker_name"))
        .select_from(replicas.outerjoin(tasks, and_(tasks.c.job_id == replicas.c.job_id, tasks.c.index == 0))
                     .outerjoin(workers, tasks.c.worker_id == workers.c.id))
        .where(replicas.c.deployment_id.in_(deployment_ids), replicas.c.state != ReplicaState.TERMINATED)
        .order_by(replicas.c.id))).all())


async def replica_tasks_holding(connection: AsyncConnection) -> list:
    """(task id, deployment name, replica state) of every replica task placed and holding resources."""
    return list((await connection.execute(
        select(tasks.c.id, deployments.c.name, replicas.c.state)
        .select_from(replicas.join(deployments, replicas.c.deployment_id == deployments.c.id)
                     .join(tasks, tasks.c.job_id == replicas.c.job_id))
        .where(tasks.c.state.in_([str(s) for s in TASK_HOLDS_RESOURCES]), tasks.c.worker_id.is_not(None))
    )).all())
