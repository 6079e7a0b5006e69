"""The target rows a handler run reads: each job's columns once, with its task rows (read by position, the task's
index its own column), in submission order, in one statement; at most `limit` task rows, a job they cut off left
whole to the next pass."""

from __future__ import annotations

from sqlalchemy import update

from corral.core.states import JobState, TaskState
from corral.store.reads import T_ID, T_INDEX, T_JOB_ID, T_STATE, TASK_SLOTS, target_rows
from corral.store.schema import jobs, tasks
from tests.store.helpers import submit

PENDING_TASKS = ({JobState.PENDING}, False, {TaskState.PENDING})


def _indexes(found) -> list[tuple[int, int]]:
    return [(row[T_JOB_ID], row[T_INDEX]) for _, rows in found for row in rows]


async def test_each_job_once_with_its_task_rows_by_position(store):
    first = await submit(store, replicas=3)
    second = await submit(store, replicas=2, max_retries_failure=2, grace_period=5)
    async with store.read() as connection:
        found = await target_rows(connection, *PENDING_TASKS)
    assert [job.job_id for job, _ in found] == [first, second]
    assert _indexes(found) == [(first, 0), (first, 1), (first, 2), (second, 0), (second, 1)]
    job = found[1][0]
    assert (job.job_state, job.gang, job.cancelled, job.max_retries_failure, job.grace_period) == \
        (JobState.PENDING, False, False, 2, 5.0)
    assert type(job.gang) is bool and type(job.cancelled) is bool
    for _, rows in found:
        for row in rows:
            assert len(row) >= len(TASK_SLOTS) and row[T_STATE] == TaskState.PENDING
    assert len({row[T_ID] for _, rows in found for row in rows}) == 5


async def test_a_job_cut_off_by_the_limit_is_left_whole_to_the_next_pass(store):
    first = await submit(store, replicas=3)
    await submit(store, replicas=3)
    async with store.read() as connection:
        cut = await target_rows(connection, *PENDING_TASKS, limit=4)
        # Reaching the limit at a job's last task: the last job may have been cut off, so it waits too.
        at_the_end = await target_rows(connection, *PENDING_TASKS, limit=6)
        one_more = await target_rows(connection, *PENDING_TASKS, limit=7)
        # One job alone past the limit: its first rows, or no pass would ever read it.
        alone = await target_rows(connection, *PENDING_TASKS, limit=2)
    assert _indexes(cut) == _indexes(at_the_end) == [(first, 0), (first, 1), (first, 2)]
    assert len(_indexes(one_more)) == 6
    assert _indexes(alone) == [(first, 0), (first, 1)]


async def test_only_the_jobs_of_task_rows_read_and_the_limit_counts_task_rows(store):
    """A running job with no pending task has no row; one with some has only those; jobs of one task each do not
    count against the limit."""
    running = await submit(store, replicas=3)
    idle = await submit(store, replicas=2)
    singles = [await submit(store) for _ in range(4)]
    async with store.write() as connection:
        await connection.execute(update(jobs).where(jobs.c.id.in_([running, idle])).values(state=JobState.RUNNING))
        await connection.execute(update(tasks).where(tasks.c.job_id == idle).values(state=TaskState.RUNNING))
        await connection.execute(update(tasks).where(tasks.c.job_id == running, tasks.c.index != 1)
                                 .values(state=TaskState.RUNNING))
    async with store.read() as connection:
        found = await target_rows(connection, *PENDING_TASKS)
        limited = await target_rows(connection, *PENDING_TASKS, limit=4)
    assert _indexes(found) == [(running, 1)] + [(job, 0) for job in singles]
    assert found[0][0].job_state == JobState.RUNNING
    assert _indexes(limited) == [(running, 1)] + [(job, 0) for job in singles[:2]]


async def test_a_gang_is_read_whole_with_its_launcher(store):
    launcher = await submit(store)
    gang = await submit(store, replicas=2, gang=True)
    async with store.write() as connection:
        await connection.execute(update(jobs).where(jobs.c.id == launcher)
                                 .values(state=JobState.TERMINATING, cancelled=True))
        await connection.execute(update(jobs).where(jobs.c.id == gang).values(launched_by=launcher))
        await connection.execute(update(tasks).where(tasks.c.job_id == gang, tasks.c.index == 0)
                                 .values(state=TaskState.RUNNING))
    async with store.read() as connection:
        whole = await target_rows(connection, {JobState.PENDING}, True, set())
        launched = await target_rows(connection, {JobState.PENDING}, False, set(),
                                     launcher_states={JobState.TERMINATING})
        none = await target_rows(connection, {JobState.PENDING}, False, set(), launcher_states={JobState.FAILED})
    assert _indexes(whole) == _indexes(launched) == [(gang, 0), (gang, 1)]
    job = launched[0][0]
    assert job.gang is True and job.launcher_id == launcher and job.launcher_cancelled is True
    assert (job.launcher_state, job.launcher_outcome) == (JobState.TERMINATING, None)
    assert whole[0][0].launcher_id is None and none == []
