"""A known set of jobs and attempts with fixed times, and the usage they must add up to.

The window is [NOW, NOW + 1000]. Each attempt's reservation and seconds inside the window are chosen so that
every sum is exact in floating point.
"""

from __future__ import annotations

from sqlalchemy import insert, update

from corral.core.deployment_spec import DeploymentSpec
from corral.store.changes import ChangeSet
from corral.store.deployments import insert_deployment, insert_replica
from corral.store.schema import attempts, deployments, jobs, replicas, tasks
from tests.store.helpers import NOW, job_tasks, submit

GIB = 2**30
SINCE, UNTIL = NOW, NOW + 1000.0


async def add_attempts(store, task_id: int, *spans: tuple[float, float | None]) -> None:
    """Attempts 1, 2, ... of the task, each (assigned_at, finished_at); finished_at None: still running."""
    async with store.write() as connection:
        await connection.execute(insert(attempts), [
            {"task_id": task_id, "attempt": n, "worker_id": "w0", "state": "RUNNING" if end is None else "SUCCEEDED",
             "assigned_at": start, "started_at": start, "finished_at": end}
            for n, (start, end) in enumerate(spans, start=1)])


async def add_job(store, owner: str, *spans_per_task, **spec) -> int:
    job_id = await submit(store, replicas=len(spans_per_task), **spec)
    async with store.write() as connection:
        await connection.execute(update(jobs).where(jobs.c.id == job_id).values(owner=owner))
    for task, spans in zip(await job_tasks(store, job_id), spans_per_task, strict=True):
        await add_attempts(store, task.id, *spans)
    return job_id


async def add_replica(store, owner: str, *spans, **spec) -> int:
    """A deployment of `owner` with one replica whose job (owned by the admin, as replicas are made) ran `spans`."""
    async with store.write() as connection:
        deployment_spec = DeploymentSpec(command=["serve"], **spec)
        deployment_id = await insert_deployment(connection, deployment_spec, [], NOW)
        await connection.execute(update(deployments).where(deployments.c.id == deployment_id).values(owner=owner))
        changes = ChangeSet(NOW)
        replica_id = await insert_replica(connection, changes, deployment_id, deployment_spec, "Test")
        await changes.flush(connection)
        job_id = (await connection.execute(
            replicas.select().where(replicas.c.id == replica_id))).one().job_id
        task_id = (await connection.execute(tasks.select().where(tasks.c.job_id == job_id))).one().id
    await add_attempts(store, task_id, *spans)
    return job_id


async def known_usage(store) -> None:
    """The jobs every usage test reads; EXPECTED holds what they add up to over [SINCE, UNTIL]."""
    big = {"cpu": 2, "memory": GIB, "gpu": 1}
    await add_job(store, "alice", [(NOW, NOW + 100), (NOW + 200, NOW + 300)], project="vision", resources=big)
    await add_job(store, "bob", [(NOW + 100, NOW + 500)], project="vision", pool="a100",
                  resources={"cpu": 1, "memory": 2 * GIB, "gpu": 0.25})  # a quarter of a device
    await add_job(store, "alice", [(NOW + 10, NOW + 60)], [(NOW + 20, NOW + 70)], project="nlp",
                  resources={"cpu": 4})
    await add_job(store, "bob", [(NOW - 900, NOW - 800), (NOW - 500, NOW + 100), (UNTIL + 1, UNTIL + 50)],
                  project="nlp")  # before the window, across its start (100 s in it), after it
    await add_job(store, "carol", [(NOW + 900, None)], project="vision")  # still running: counts to UNTIL
    await add_replica(store, "dave", (NOW + 300, NOW + 500), name="chat", project="serve")


def sums(attempts_: int, cpu: float, memory_gib: float = 0.0, gpu: float = 0.0) -> dict:
    return {"attempts": attempts_, "cpu_seconds": cpu, "memory_byte_seconds": memory_gib * GIB, "gpu_seconds": gpu}


EXPECTED = {
    "user": {"alice": sums(4, 800, 200, 200), "bob": sums(2, 500, 800, 100), "carol": sums(1, 100),
             "dave": sums(1, 200)},
    "project": {"nlp": sums(3, 500), "serve": sums(1, 200), "vision": sums(4, 900, 1000, 300)},
    "pool": {"a100": sums(1, 400, 800, 100), "default": sums(7, 1200, 200, 200)},
}
TOTALS = sums(8, 1600, 1000, 300)
