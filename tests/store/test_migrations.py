"""Every migration runs both ways on both stores, over a store that holds rows (a job that ran, a worker's events).

On SQLite a migration that changes a table's columns copies the table and drops the old one: with foreign keys
enforced, dropping `jobs` or `tasks` while tasks or attempts point at them failed (0002's and 0014's downgrades,
and 0014's upgrade of a store older than it). 0005's downgrade could not make history.job_id NOT NULL again while
the workers' events (no job) were in it.
"""

from __future__ import annotations

from sqlalchemy import func, select

from corral.store.database import downgrade, migrate
from corral.store.schema import attempts, history, jobs, tasks, workers
from tests.store.helpers import add_worker, job_tasks, report, settle, submit


async def counts(store) -> dict[str, int]:
    async with store.engine.connect() as connection:
        return {table.name: (await connection.execute(select(func.count()).select_from(table))).scalar_one()
                for table in (jobs, tasks, attempts, workers)}


async def a_store_that_ran_a_job(store) -> dict[str, int]:
    worker = await add_worker(store)
    job_id = await submit(store, replicas=2)
    await settle(store)
    first, second = await job_tasks(store, job_id)
    await report(store, worker, (first.id, first.attempt, "RUNNING"), (second.id, second.attempt, "RUNNING"))
    await report(store, worker, (first.id, first.attempt, "SUCCEEDED", 0))
    await settle(store)
    async with store.engine.connect() as connection:
        worker_events = (await connection.execute(
            select(func.count()).select_from(history).where(history.c.job_id.is_(None)))).scalar_one()
    assert worker_events  # the worker's registration: a row the schema before 0005 cannot hold
    return await counts(store)


async def foreign_keys_enforced(store) -> bool:
    if not store.is_sqlite:
        return True
    async with store.engine.connect() as connection:
        return bool((await connection.exec_driver_sql("PRAGMA foreign_keys")).scalar())


async def test_the_first_migration_and_back_keeps_the_rows(store):
    before = await a_store_that_ran_a_job(store)
    assert before == {"jobs": 1, "tasks": 2, "attempts": 2, "workers": 1}
    await downgrade(store.engine, "0001")
    assert await foreign_keys_enforced(store)
    async with store.engine.connect() as connection:
        kept = {name: (await connection.exec_driver_sql(f"SELECT count(*) FROM {name}")).scalar_one()
                for name in before}
    assert kept == before
    await migrate(store.engine)
    assert await counts(store) == before
    assert await foreign_keys_enforced(store)
    job_id = await submit(store)  # the store at head again takes and places jobs
    await settle(store)
    assert len(await job_tasks(store, job_id)) == 1


async def test_down_to_no_tables_and_up_again(store):
    await a_store_that_ran_a_job(store)
    await downgrade(store.engine, "base")
    async with store.engine.connect() as connection:
        left = await connection.run_sync(lambda sync: sync.dialect.get_table_names(sync))
    assert set(left) <= {"alembic_version"}
    await migrate(store.engine)
    assert await counts(store) == {"jobs": 0, "tasks": 0, "attempts": 0, "workers": 0}
