"""Specs stored with a CPU reservation below the minimum are raised to it, so they still read."""

from __future__ import annotations

from sqlalchemy import select, update

from corral.core.spec import MIN_CPU, JobSpec
from corral.store.database import downgrade, migrate
from corral.store.schema import jobs, tasks
from tests.store.helpers import submit


async def test_a_job_stored_with_no_cpu_is_raised_to_the_minimum_and_reads_again(store):
    job_id = await submit(store, replicas=2)
    await downgrade(store.engine, "0010")
    async with store.engine.begin() as connection:
        spec = (await connection.execute(select(jobs.c.spec).where(jobs.c.id == job_id))).scalar_one()
        await connection.execute(update(jobs).values(spec={**spec, "resources": {**spec["resources"], "cpu": 0}}))
        await connection.execute(update(tasks).values(cpu=0))
    await migrate(store.engine)
    async with store.read() as connection:
        stored = (await connection.execute(select(jobs.c.spec).where(jobs.c.id == job_id))).scalar_one()
        reserved = list((await connection.execute(select(tasks.c.cpu))).scalars())
    assert JobSpec.model_validate(stored).resources.cpu == MIN_CPU
    assert reserved == [MIN_CPU, MIN_CPU]
