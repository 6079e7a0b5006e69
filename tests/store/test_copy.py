"""copy_store: a SQLite store's rows, exactly, in an empty PostgreSQL database, with its sequences past them."""

from __future__ import annotations

import pytest
from sqlalchemy import select, text, update

from corral.store import copy as store_copy
from corral.store.cluster_state import ControllerRow, register_controller
from corral.store.copy import CopyRefused, copy_store
from corral.store.database import sqlite_url
from corral.store.schema import history, jobs, metadata, tasks, workers
from corral.store.store import Store
from tests.postgres import scratch_database
from tests.store.helpers import add_worker, settle, submit


async def rows_of(store: Store) -> dict[str, list]:
    async with store.read() as connection:
        return {table.name: (await connection.execute(select(table).order_by(*table.primary_key.columns))).all()
                for table in metadata.sorted_tables}


async def test_every_row_is_copied_and_new_ids_follow_the_copied_ones(tmp_path, monkeypatch):
    monkeypatch.setattr(store_copy, "CHUNK_ROWS", 2)  # several chunks per table
    source = await Store.open(sqlite_url(tmp_path / "corral.db"))
    worker_id = await add_worker(source)
    placed = await submit(source, replicas=3)
    waiting = await submit(source, resources={"cpu": 64})
    await settle(source)
    async with source.write() as connection:  # a JSON column holding JSON null, beside ones holding SQL NULL
        await connection.execute(update(workers).values(custom=None).where(workers.c.id == worker_id))
        # a controller of the source that died without deleting its row in the registry: not copied
        await register_controller(connection, ControllerRow("h:1:1", "http://h:8265", 1, "h", "0.1.0", 1.0, 2.0,
                                                            {"ScheduleJobs": 2.0}, 2.0))
    expected = await rows_of(source)
    assert len(expected.pop("controllers")) == 1
    await source.close()

    async with scratch_database() as url:
        copied = await copy_store(sqlite_url(tmp_path / "corral.db"), url)
        assert copied == {name: len(rows) for name, rows in expected.items()}
        assert copied["jobs"] == 2 and copied["tasks"] == 4 and copied["workers"] == 1 and copied["history"] > 4

        destination = await Store.open(url)
        try:
            assert await rows_of(destination) == {**expected, "controllers": []}
            async with destination.read() as connection:
                custom_is_sql_null = (await connection.execute(text(
                    "SELECT custom IS NULL FROM workers"))).scalar_one()
                world_is_sql_null = (await connection.execute(text(
                    "SELECT bool_and(world IS NULL) FROM attempts"))).scalar_one()
            assert (custom_is_sql_null, world_is_sql_null) == (False, True)
            new_job = await submit(destination)
            async with destination.read() as connection:
                new_task = (await connection.execute(select(tasks.c.id).where(tasks.c.job_id == new_job))).scalar()
                new_event = (await connection.execute(select(history.c.id).order_by(history.c.id.desc()))).first()
            assert new_job == max(placed, waiting) + 1
            assert new_task == max(row.id for row in expected["tasks"]) + 1
            assert new_event.id > max(row.id for row in expected["history"])

            held = r"already holds rows \(in history, jobs, workers, tasks, attempts\).*createdb"
            with pytest.raises(CopyRefused, match=held):
                await copy_store(sqlite_url(tmp_path / "corral.db"), url)
            async with destination.read() as connection:
                assert (await connection.execute(select(jobs.c.id))).scalars().all() == [placed, waiting, new_job]
        finally:
            await destination.close()


async def test_a_failed_copy_writes_nothing(tmp_path):
    source = await Store.open(sqlite_url(tmp_path / "corral.db"))
    await submit(source)
    async with source.write() as connection:  # SQLite keeps what PostgreSQL's VARCHAR(20) refuses
        await connection.execute(update(jobs).values(state="X" * 30))
    await source.close()
    async with scratch_database() as url:
        failed = "the copy failed copying the table jobs, nothing was written: value too long"
        with pytest.raises(CopyRefused, match=failed):
            await copy_store(sqlite_url(tmp_path / "corral.db"), url)
        destination = await Store.open(url)
        try:
            assert all(not rows for rows in (await rows_of(destination)).values())
        finally:
            await destination.close()
