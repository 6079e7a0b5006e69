"""The target rows a handler run reads: every column by name, the task's index as a column (never the tuple's
method), in submission order."""

from __future__ import annotations

from corral.core.states import JobState, TaskState
from corral.store.reads import target_rows
from tests.store.helpers import submit


async def test_target_rows_name_every_column_and_the_index_is_the_tasks(store):
    first = await submit(store, replicas=3)
    second = await submit(store, replicas=2)
    async with store.read() as connection:
        rows = await target_rows(connection, {JobState.PENDING}, False, {TaskState.PENDING})
    assert [(row.job_id, row.index) for row in rows] == [(first, 0), (first, 1), (first, 2), (second, 0),
                                                         (second, 1)]
    assert all(row.state == TaskState.PENDING and row.job_state == JobState.PENDING for row in rows)
    assert len({row.id for row in rows}) == 5


async def test_a_job_cut_off_by_the_limit_is_left_whole_to_the_next_pass(store):
    first = await submit(store, replicas=3)
    await submit(store, replicas=3)
    async with store.read() as connection:
        rows = await target_rows(connection, {JobState.PENDING}, False, {TaskState.PENDING}, limit=4)
    assert [(row.job_id, row.index) for row in rows] == [(first, 0), (first, 1), (first, 2)]
