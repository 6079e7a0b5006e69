"""A wait seen again is counted on the job's latest wait record of the handler, found through the index of wait
records (`ix_history_waits`), not by walking the job's history: an array's task rows made that walk grow with it."""

from __future__ import annotations

import pytest
from sqlalchemy import event

from corral.core.states import TaskState
from corral.store.changes import ALIKE_FROM, ChangeSet, TaskRow
from tests.store.helpers import NOW, job_history


async def count_statements(store, job_ids) -> list[tuple[str, object]]:
    """The statements (driver's text, first row of parameters) that count the waits of `job_ids` seen again."""
    seen: list[tuple[str, object]] = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        if statement.startswith("UPDATE history SET repeats"):
            seen.append((statement, parameters[0] if executemany else parameters))

    changes = ChangeSet(NOW + 1)
    for job_id in job_ids:
        changes.wait(job_id, "ScheduleJobs", "PENDING", "no room", repeated=True)
    event.listen(store.writer.sync_engine, "before_cursor_execute", capture)
    try:
        async with store.write() as connection:
            await changes.flush(connection)
    finally:
        event.remove(store.writer.sync_engine, "before_cursor_execute", capture)
    return seen


@pytest.mark.parametrize("jobs", [1, ALIKE_FROM])
async def test_a_wait_seen_again_finds_its_record_through_the_wait_index(store, jobs):
    """One job's count (a row of the executemany) and many jobs' alike (one statement) both."""
    (statement, parameters), = await count_statements(store, range(1, jobs + 1))
    async with store.write() as connection:
        if not store.is_sqlite:  # a small table is read whole by PostgreSQL: asked which index it would take
            await connection.exec_driver_sql("SET LOCAL enable_seqscan = off")
        explain = "EXPLAIN QUERY PLAN " if store.is_sqlite else "EXPLAIN "
        plan = "\n".join(str(row[-1]) for row in (await connection.exec_driver_sql(explain + statement,
                                                                                    parameters)).all())
    assert "ix_history_waits" in plan, plan


async def test_a_wait_seen_again_lands_on_the_latest_wait_record_of_its_job_and_handler_only(store):
    """What the index holds (SKIPPED rows of no task) is what the count looks among: a task's SKIPPED row, another
    handler's wait and another job's are passed over, and a newer wait of another reason stops the count."""
    task = TaskRow(7, 1, 0, TaskState.PENDING, 1, None)
    async with store.write() as connection:
        first = ChangeSet(NOW)
        first.wait(1, "ScheduleJobs", "PENDING", "no room", repeated=False)
        first.wait(1, "Other", "PENDING", "no room", repeated=False)
        first.record(1, "ScheduleJobs", "SKIPPED", "PENDING", None, "no room", task=task)
        first.wait(2, "ScheduleJobs", "PENDING", "no room", repeated=False)
        first.wait(3, "ScheduleJobs", "PENDING", "no room", repeated=False)
        first.wait(3, "ScheduleJobs", "PENDING", "held", repeated=False)
        await first.flush(connection)
        again = ChangeSet(NOW + 1)
        for job_id in (1, 3):
            again.wait(job_id, "ScheduleJobs", "PENDING", "no room", repeated=True)
        await again.flush(connection)
    rows = [(h.job_id, h.handler, h.task_id, h.message, h.repeats, h.last_at)
            for job_id in (1, 2, 3) for h in await job_history(store, job_id)]
    assert rows == [
        (1, "ScheduleJobs", None, "no room", 2, NOW + 1), (1, "Other", None, "no room", 1, None),
        (1, "ScheduleJobs", 7, "no room", 1, None), (2, "ScheduleJobs", None, "no room", 1, None),
        (3, "ScheduleJobs", None, "no room", 1, None), (3, "ScheduleJobs", None, "held", 1, None),
    ]
