"""insert_jobs_at: the jobs of several calls written together, their ids in order, each with its own columns and
time, on both backends."""

from __future__ import annotations

from sqlalchemy import event, select

from corral.core.spec import JobSpec
from corral.store.jobs import NewJob, insert_jobs_at
from corral.store.schema import history, jobs, tasks

RETRIED = {"max_retries": 2, "retry_state": "ARMED"}  # a job under a retry policy has columns the others leave out


async def test_the_jobs_of_one_write_come_in_order_each_with_its_own_columns_and_time(store) -> None:
    dated = [(NewJob(JobSpec(command=["true"], name=f"j{i}", replicas=1 + i % 2),
                     columns={"owner": f"u{i}", **(RETRIED if i in (3, 4) else {})}), 100.0 + i) for i in range(7)]
    async with store.write() as connection:
        ids = await insert_jobs_at(connection, dated)
    assert ids == sorted(ids) and len(set(ids)) == 7
    async with store.read() as connection:
        rows = (await connection.execute(select(jobs.c.id, jobs.c.name, jobs.c.owner, jobs.c.max_retries,
                                                jobs.c.created_at).order_by(jobs.c.id))).all()
        first = (await connection.execute(select(history.c.job_id, history.c.at).order_by(history.c.id))).all()
        made = (await connection.execute(select(tasks.c.job_id, tasks.c.state_since).order_by(tasks.c.id))).all()
    assert [tuple(row) for row in rows] == [(job_id, f"j{i}", f"u{i}", 2 if i in (3, 4) else 0, 100.0 + i)
                                            for i, job_id in enumerate(ids)]
    assert [tuple(row) for row in first] == [(job_id, 100.0 + i) for i, job_id in enumerate(ids)]
    assert [tuple(row) for row in made] == [(job_id, 100.0 + i) for i, job_id in enumerate(ids)
                                            for _ in range(1 + i % 2)]


async def test_jobs_of_alike_columns_are_one_statement_their_ids_in_order(store) -> None:
    """A run of jobs of the same columns is one INSERT, a job under a retry policy (more columns) another; each id
    is its own row's, on SQLite (ids returned unordered, sorted) as on PostgreSQL (returned in order)."""
    statements = []
    event.listen(store.writer.sync_engine, "before_cursor_execute",
                 lambda *args: statements.append(args[2].split()[:3]))
    dated = [(NewJob(JobSpec(command=["true"], name=f"j{i}"), columns={"owner": "u", **(RETRIED if i == 40 else {})}),
              100.0 + i) for i in range(60)]
    async with store.write() as connection:
        ids = await insert_jobs_at(connection, dated)
    assert [words[2] for words in statements if words[:2] == ["INSERT", "INTO"]].count("jobs") == 3
    async with store.read() as connection:
        rows = (await connection.execute(select(jobs.c.id, jobs.c.name, jobs.c.created_at))).all()
    assert sorted(tuple(row) for row in rows) == [(job_id, f"j{i}", 100.0 + i) for i, job_id in enumerate(ids)]
