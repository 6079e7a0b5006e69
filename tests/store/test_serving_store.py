"""Deployments and replicas over a real store (SQLite and PostgreSQL): the serving handlers with the job engine."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import select

from corral.core.deployment_spec import DeploymentSpec
from corral.core.protocol import TaskReport
from corral.core.serving import Catalog, Probe
from corral.engine.reports import ingest_heartbeat
from corral.engine.serving_coordinator import run_serving_handler
from corral.engine.serving_handlers import SERVING_HANDLERS
from corral.serving.backends import LocalBackend
from corral.serving.pool import read_pool
from corral.store.deployments import NameTaken, destroy_deployment, insert_deployment, scale_deployment
from corral.store.events import latest_by_deployment, read_events, stream_start
from corral.store.schema import deployments, history, replicas
from corral.store.worker_state import mark_all_seen
from tests.store.helpers import NOW, add_worker, job, job_tasks, report, settle, submit

SPEC = DeploymentSpec(name="svc", command=["serve"], min_replicas=1, resources={"cpu": 1},
                      health={"interval": 1, "threshold": 2})


async def serve_pass(store, now, probes=None, published=None) -> None:
    """Serving handlers and job handlers to a fixed point, as the two loops would."""
    for _ in range(20):
        changed = False
        for handler in SERVING_HANDLERS:
            report_ = await run_serving_handler(store, handler, now, probes or {},
                                                published.append if published is not None else None)
            changed |= report_.changed
        await settle(store, now)
        if not changed:
            return
    raise AssertionError("no fixed point")


async def live_replicas(store):
    async with store.read() as connection:
        return (await connection.execute(
            select(replicas).where(replicas.c.state != "TERMINATED").order_by(replicas.c.id))).all()


async def pool_of(store):
    async with store.read() as connection:
        return await read_pool(connection)


async def start_replica(store, worker, replica, port=9000, now=NOW):
    """Report the replica's task built, then running with its port, as its worker would."""
    (task,) = await job_tasks(store, replica.job_id)
    await report(store, worker, (task.id, task.attempt, "BUILDING"), (task.id, task.attempt, "PREPARED"), now=now)
    await settle(store, now)
    async with store.write() as connection:
        await ingest_heartbeat(connection, worker, [TaskReport(task_id=task.id, attempt=task.attempt, state="RUNNING",
                                                               at=now, port=port)], now)
    return task


async def test_a_deployment_gets_a_replica_task_that_becomes_healthy_and_is_published(store):
    worker = await add_worker(store)
    async with store.write() as connection:
        await insert_deployment(connection, SPEC, [], NOW)
    await serve_pass(store, NOW)
    (replica,) = await live_replicas(store)
    assert replica.state == "PROVISIONING"
    assert (await job(store, replica.job_id)).spec["allocate_port"] is True
    await start_replica(store, worker, replica)
    await serve_pass(store, NOW)
    (replica,) = await live_replicas(store)
    assert (replica.state, replica.address) == ("DEGRADED", "127.0.0.1:9000")
    published: list[Catalog] = []
    await serve_pass(store, NOW + 1, probes={replica.id: Probe(NOW + 1, True, 0)}, published=published)
    (replica,) = await live_replicas(store)
    assert replica.state == "HEALTHY"
    assert [e.address for e in published[-1].endpoints["svc"]] == ["127.0.0.1:9000"]
    assert [h.worker_id for h in (await pool_of(store)).holdings["svc"]] == [worker]


async def test_the_pool_shows_what_a_replica_holds_custom_slots_included(store):
    worker = await add_worker(store, "tpu-box", custom={"tpu": 2})
    spec = SPEC.model_copy(update={"resources": SPEC.resources.model_copy(update={"custom": {"tpu": 1}})})
    async with store.write() as connection:
        await insert_deployment(connection, spec, [], NOW)
    await serve_pass(store, NOW)
    (holding,) = (await pool_of(store)).holdings["svc"]
    assert (holding.worker_id, holding.request.cpu, holding.request.custom) == (worker, 1.0, (("tpu", 1.0),))


async def test_the_routers_pool_is_read_only_while_a_deployment_is_not_destroyed(store):
    """The in-process router reads the pool every second: with no deployment it is empty, the cluster unread."""
    worker = await add_worker(store)
    backend = LocalBackend(store, changed=None)
    assert (await backend.pool()).rooms == [] and [room.id for room in (await pool_of(store)).rooms] == [worker]
    async with store.write() as connection:
        await insert_deployment(connection, SPEC, [], NOW)
    assert [room.id for room in (await backend.pool()).rooms] == [worker]
    async with store.write() as connection:
        await destroy_deployment(connection, "svc", NOW)
    await serve_pass(store, NOW)
    assert (await backend.pool()).rooms == []


async def test_the_routers_pool_is_read_again_only_after_a_commit_that_may_move_state(store, monkeypatch):
    """The router looks at the pool every second: where every writer is this store (SQLite), a look after nothing
    but liveness marks reads nothing and finds the pool as it was; on a shared store each look reads."""
    worker = await add_worker(store)
    async with store.write() as connection:
        await insert_deployment(connection, SPEC, [], NOW)
    reads = 0
    read = store.read

    def counted_read(*args, **kwargs):
        nonlocal reads
        reads += 1
        return read(*args, **kwargs)

    monkeypatch.setattr(store, "read", counted_read)
    backend = LocalBackend(store, changed=None)
    first = await backend.pool()
    assert [room.id for room in first.rooms] == [worker] and reads == 1
    async with store.write(moves_state=False) as connection:  # a heartbeat's liveness mark
        await mark_all_seen(connection, {worker: NOW + 1})
    assert await backend.pool() == first
    assert reads == (1 if store.is_sqlite else 2)
    second = await add_worker(store, name="w1")
    assert [room.id for room in (await backend.pool()).rooms] == [worker, second]
    assert reads == (2 if store.is_sqlite else 3)


async def test_scaling_to_zero_cancels_the_replica_job_and_destroy_ends_the_deployment(store):
    worker = await add_worker(store)
    async with store.write() as connection:
        await insert_deployment(connection, SPEC, [], NOW)
    await serve_pass(store, NOW)
    (replica,) = await live_replicas(store)
    task = await start_replica(store, worker, replica)
    assert [h.leaving for h in (await pool_of(store)).holdings["svc"]] == [False]
    async with store.write() as connection:
        assert await scale_deployment(connection, "svc", 0, "idle", NOW) == 1
    await serve_pass(store, NOW)
    assert (await job(store, replica.job_id)).state == "TERMINATING"
    pool = await pool_of(store)  # its task holds the room until the process ends, but it is on its way out
    assert [h.leaving for h in pool.holdings["svc"]] == [True] and pool.placed("svc") == 0
    await report(store, worker, (task.id, task.attempt, "KILLED"))
    await serve_pass(store, NOW)
    assert await live_replicas(store) == []
    assert (await pool_of(store)).holdings == {}
    async with store.write() as connection:
        await destroy_deployment(connection, "svc", NOW)
    await serve_pass(store, NOW)
    async with store.read() as connection:
        row = (await connection.execute(select(deployments))).one()
        handlers = [h.handler for h in (await connection.execute(
            select(history).where(history.c.deployment_id.is_not(None)))).all()]
    assert row.state == "DESTROYED"
    assert {"Deploy", "CheckPendingDeployment", "ScalingDeployment", "ProvisioningReplica", "Scale",
            "TerminatingReplica", "Undeploy", "DestroyingDeployment"} <= set(handlers)


async def test_a_live_name_cannot_be_taken_twice_but_a_destroyed_one_can(store):
    async with store.write() as connection:
        await insert_deployment(connection, SPEC, [], NOW)
    with pytest.raises(NameTaken):
        async with store.write() as connection:
            await insert_deployment(connection, SPEC, [], NOW)
    async with store.write() as connection:
        await destroy_deployment(connection, "svc", NOW)
    await serve_pass(store, time.time())
    async with store.write() as connection:
        assert await insert_deployment(connection, SPEC, [], NOW) == 2


async def test_a_failing_replica_is_unhealthy_evicted_and_replaced_on_the_event_stream_of_its_deployment(store):
    worker = await add_worker(store)
    async with store.write() as connection:
        await insert_deployment(connection, SPEC, [], NOW)
        await insert_deployment(connection, SPEC.model_copy(update={"name": "other"}), [], NOW)
    await serve_pass(store, NOW)
    first = next(r for r in await live_replicas(store) if r.deployment_id == 1)
    await start_replica(store, worker, first)
    await serve_pass(store, NOW, probes={first.id: Probe(NOW, True, 0)})
    failing = {first.id: Probe(NOW + 2, False, 2, "503 from http://127.0.0.1:9000/health")}
    await serve_pass(store, NOW + 2, probes=failing)  # unhealthy
    await serve_pass(store, NOW + 4, probes=failing)  # a failure window later: evicted and replaced
    async with store.read() as connection:
        events = await read_events(connection, 0, deployment="svc")
        start = await stream_start(connection, 2, None, "svc")
        last_two = await read_events(connection, start.after_last, deployment="svc")
        unknown = await read_events(connection, 0, deployment="nobody")
        others = await read_events(connection, 0, deployment="other")
        latest = await latest_by_deployment(connection, ["svc", "other", "nobody"], 2)
    assert {e.deployment for e in events} == {"svc"} and unknown == []
    assert last_two == events[-2:]
    assert latest == {"svc": events[-2:], "other": others[-2:]}  # the board's one query for every deployment
    mine = [(e.type, e.replica_id) for e in events if e.replica_id is not None]
    assert mine[:3] == [("replica.provisioning", first.id), ("replica.started", first.id),
                        ("replica.healthy", first.id)]
    tail = [t for t, _ in mine[3:]]
    assert tail[:3] == ["replica.unhealthy", "replica.evicted", "replica.replaced"]
    unhealthy, evicted, replaced = (next(e for e in events if e.type == t) for t in tail[:3])
    assert unhealthy.message == "health check failed 2 times: 503 from http://127.0.0.1:9000/health"
    assert evicted.message.endswith(unhealthy.message) and evicted.replica_id == first.id
    assert replaced.replica_id != first.id and replaced.message.endswith(f"in place of replica {first.id}")
    assert [e.type for e in events if e.replica_id is None][:3] == [
        "deployment.created", "deployment.scaling", "deployment.ready"]


async def test_migration_0008_moves_serving_history_into_the_event_stream_and_back(store):
    from corral.store.database import downgrade, migrate

    async with store.write() as connection:
        await insert_deployment(connection, SPEC, [], NOW)
    await serve_pass(store, NOW)
    async with store.read() as connection:
        before = [(e.type, e.replica_id, e.message) for e in await read_events(connection, 0, deployment="svc")]
        jobs_rows = len(await read_events(connection, 0)) - len(before)
    await downgrade(store.engine, "0006")
    async with store.engine.begin() as connection:
        moved = (await connection.exec_driver_sql(
            "SELECT handler, replica_id, message FROM serving_history ORDER BY id")).all()
        left = (await connection.exec_driver_sql("SELECT count(*) FROM history")).scalar()
    assert [(m.replica_id, m.message) for m in moved] == [(replica, message) for _, replica, message in before]
    assert left == jobs_rows  # the serving rows went back to their own table
    await migrate(store.engine)
    async with store.read() as connection:
        after = [(e.type, e.replica_id, e.message) for e in await read_events(connection, 0, deployment="svc")]
    assert after == before and before[0][0] == "deployment.created"


async def fail_replica(store, worker, replica, now):
    """Its process starts, then exits 1 before it ever served."""
    task = await start_replica(store, worker, replica, now=now)
    await report(store, worker, (task.id, task.attempt, "FAILED", 1), now=now)
    await settle(store, now)


async def backoff(store):
    async with store.read() as connection:
        row = (await connection.execute(select(deployments.c.failed_starts, deployments.c.failed_start_at))).one()
    return tuple(row)


async def test_replicas_that_keep_failing_to_start_are_replaced_ever_more_slowly_until_one_serves(store):
    worker = await add_worker(store)
    async with store.write() as connection:
        await insert_deployment(connection, SPEC, [], NOW)
    await serve_pass(store, NOW)
    (first,) = await live_replicas(store)
    await fail_replica(store, worker, first, NOW)
    await serve_pass(store, NOW)
    assert await backoff(store) == (1, NOW) and await live_replicas(store) == []  # the next after 1 s
    async with store.read() as connection:
        (message,) = (await connection.execute(select(history.c.message).where(
            history.c.replica_id == first.id, history.c.to_state == "TERMINATING"))).scalars().all()
    assert message.endswith("1 replica(s) in a row ended before serving: the next starts after 1s")
    await serve_pass(store, NOW + 1)
    (second,) = await live_replicas(store)
    await fail_replica(store, worker, second, NOW + 1)
    await serve_pass(store, NOW + 1)
    assert await backoff(store) == (2, NOW + 1)
    await serve_pass(store, NOW + 2)
    assert await live_replicas(store) == []  # 2 s after NOW + 1
    await serve_pass(store, NOW + 3)
    (third,) = await live_replicas(store)
    await start_replica(store, worker, third, now=NOW + 3)
    await serve_pass(store, NOW + 3)
    await serve_pass(store, NOW + 4, probes={third.id: Probe(NOW + 4, True, 0)})
    (third,) = await live_replicas(store)
    assert third.state == "HEALTHY" and third.healthy_at == NOW + 4
    assert await backoff(store) == (0, None)  # it served: the count starts again


async def test_events_narrowed_to_projects_are_those_of_their_jobs_and_deployments(store):
    await add_worker(store)
    elsewhere = await submit(store, project="audio")
    async with store.write() as connection:
        await insert_deployment(connection, SPEC, [], NOW)
        await insert_deployment(connection, SPEC.model_copy(update={"name": "asr", "project": "audio"}), [], NOW)
    await serve_pass(store, NOW)
    async with store.read() as connection:
        every = await read_events(connection, 0)
        default = await read_events(connection, 0, projects={"default"})
        audio = await read_events(connection, 0, projects={"audio"})
        none = await read_events(connection, 0, projects=set())
        last = (await stream_start(connection, 1, projects={"audio"})).after_last
    project = {j: (await job(store, j)).spec.get("project") or "default" for j in {e.job_id for e in every} - {None}}
    assert sorted(project.values()) == ["audio", "audio", "default"]  # a replica job of each, and the audio job
    assert {e.job_id for e in default if e.job_id} == {j for j, p in project.items() if p == "default"}
    assert {e.job_id for e in audio if e.job_id} == {j for j, p in project.items() if p == "audio"} >= {elsewhere}
    assert {e.deployment for e in default if e.deployment} == {"svc"}
    assert {e.deployment for e in audio if e.deployment} == {"asr"}
    assert none == [] and last == audio[-1].id - 1
    assert len(default) + len(audio) == len(every) - 1  # all but the worker's registration
