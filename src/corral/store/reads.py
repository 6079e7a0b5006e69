"""The reads a handler run needs: its targets, in one query (a placing handler also reads scheduling_reads), and
what settling a job reads."""

from __future__ import annotations

from collections import Counter, defaultdict, namedtuple
from collections.abc import Collection
from functools import cache

from sqlalchemy import and_, false, func, or_, select, true
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.states import JobState, TaskState
from corral.store.changes import TaskRow
from corral.store.schema import jobs, tasks

BATCH_ROWS = 10_000  # a handler run fetches at most this many task rows; the rest wait a pass
TASK_TARGET_JOB_STATES = (JobState.PENDING, JobState.RUNNING)  # the independent jobs whose tasks are targets

JOB_COLUMNS = (
    jobs.c.id.label("job_id"), jobs.c.state.label("job_state"), jobs.c.gang, jobs.c.tries.label("job_tries"),
    jobs.c.state_since.label("job_since"), jobs.c.max_task_failures, jobs.c.scheduling_timeout,
    jobs.c.pending_reason, jobs.c.outcome, jobs.c.cancelled, jobs.c.max_retries_failure,
    jobs.c.max_retries_preemption, jobs.c.grace_period, jobs.c.preemption_epoch,
)
TASK_COLUMNS = (
    tasks.c.id, tasks.c.index, tasks.c.state, tasks.c.state_since, tasks.c.tries, tasks.c.attempt,
    tasks.c.worker_id, tasks.c.failures, tasks.c.preemptions, tasks.c.cpu, tasks.c.memory, tasks.c.gpu,
)


async def target_rows(
    connection: AsyncConnection,
    job_states: Collection[JobState],
    gang_only: bool,
    task_states: Collection[TaskState],
    launcher_states: Collection[JobState] = (),
    limit: int = BATCH_ROWS,
) -> list:
    """Rows (job columns + task columns) of whole-job targets and of task targets, in submission order.

    With `launcher_states`, only jobs launched by a job in one of them, with that job's columns.
    """
    whole = and_(jobs.c.state.in_([str(s) for s in job_states]), jobs.c.gang if gang_only else true())
    per_task = and_(
        jobs.c.gang.is_(False),
        jobs.c.state.in_([str(s) for s in TASK_TARGET_JOB_STATES]),
        tasks.c.state.in_([str(s) for s in task_states]),
    ) if task_states else false()
    query = (
        select(*JOB_COLUMNS, *TASK_COLUMNS)
        .select_from(tasks.join(jobs, tasks.c.job_id == jobs.c.id))
        .where(or_(whole if job_states else false(), per_task))
        .order_by(jobs.c.id, tasks.c.index)
        .limit(limit)
    )
    if launcher_states:
        launcher = jobs.alias("launcher")
        query = query.join(launcher, jobs.c.launched_by == launcher.c.id).add_columns(
            launcher.c.id.label("launcher_id"), launcher.c.state.label("launcher_state"),
            launcher.c.cancelled.label("launcher_cancelled"), launcher.c.outcome.label("launcher_outcome"),
        ).where(launcher.c.state.in_([str(s) for s in launcher_states]))
    result = await connection.execute(query)
    rows = list(map(_plain_row(tuple(result.keys()))._make, result.all()))
    if len(rows) == limit and rows[0].job_id != rows[-1].job_id:
        last = rows[-1].job_id  # its tasks may be cut off: leave the whole job to the next pass
        rows = [row for row in rows if row.job_id != last]
    return rows


@cache
def _plain_row(columns: tuple[str, ...]) -> type:
    """A named tuple of these columns: a pass reads some twenty columns of each of its (up to 200,000) rows by name,
    and a database row answers a name (above all "index", which it first asks whether it means its own method)
    some twenty times slower than a named tuple does."""
    return namedtuple("TargetRow", columns)


async def present_states(connection: AsyncConnection,
                         job_states: Collection[JobState]) -> set[tuple[str, bool, str, bool]]:
    """Which (job state, gang, task state, launched by a job) there are rows of, among jobs in `job_states`: what a
    pass reads once to know which handlers could have targets at all (one query, not a transaction per handler)."""
    return {(row.state, row.gang, row.task_state, row.launched) for row in (await connection.execute(
        select(jobs.c.state, jobs.c.gang, tasks.c.state.label("task_state"),
               jobs.c.launched_by.is_not(None).label("launched")).distinct()
        .select_from(tasks.join(jobs, tasks.c.job_id == jobs.c.id))
        .where(jobs.c.state.in_([str(s) for s in job_states]))
    )).all()}


# A task state by its stored name: a dictionary answers in a tenth of the time the enum's own lookup takes, which
# counts when a run reads every row of a large job.
TASK_STATES = {str(state): state for state in TaskState}


def task_row(row) -> TaskRow:
    return TaskRow(row.id, row.job_id, row.index, TASK_STATES[row.state], row.attempt, row.worker_id,
                   row.failures, row.preemptions)


def task_columns():
    """The task columns a TaskRow is made of."""
    return (tasks.c.id, tasks.c.job_id, tasks.c.index, tasks.c.state, tasks.c.attempt, tasks.c.worker_id,
            tasks.c.failures, tasks.c.preemptions)


async def settle_rows(connection: AsyncConnection, job_ids: Collection[int]) -> tuple[list, dict[int, Counter]]:
    """The jobs settling reads (state, gang, outcome, cancelled, max_task_failures) and their tasks' state counts.

    The job rows are locked first (FOR UPDATE, in id order; a no-op on SQLite, which has one writer), so that two
    transactions moving tasks of one job (reports of two workers, on two controllers) settle it one after the
    other: the second counts the first's moves as committed, and the last task to end ends the job."""
    ids = sorted(job_ids)
    job_rows = (await connection.execute(
        select(jobs.c.id, jobs.c.state, jobs.c.gang, jobs.c.outcome, jobs.c.cancelled, jobs.c.max_task_failures)
        .where(jobs.c.id.in_(ids)).order_by(jobs.c.id).with_for_update()
    )).all()
    counts: dict[int, Counter] = defaultdict(Counter)
    for row in (await connection.execute(
        select(tasks.c.job_id, tasks.c.state, func.count().label("n"))
        .where(tasks.c.job_id.in_(ids)).group_by(tasks.c.job_id, tasks.c.state)
    )).all():
        counts[row.job_id][TaskState(row.state)] = row.n
    return job_rows, counts


async def pending_tasks(connection: AsyncConnection, job_ids: Collection[int]) -> list[TaskRow]:
    return [task_row(row) for row in (await connection.execute(
        select(*task_columns()).where(tasks.c.job_id.in_(list(job_ids)), tasks.c.state == TaskState.PENDING)
    )).all()]


# The columns of a task's job that end_attempt reads (corral.engine.attempts).
JOB_BUDGET_COLUMNS = (jobs.c.gang, jobs.c.state.label("job_state"), jobs.c.cancelled,
                      jobs.c.max_retries_failure, jobs.c.max_retries_preemption)


async def tasks_with_budgets(connection: AsyncConnection, *, task_ids: Collection[int] = (),
                             worker_ids: Collection[str] = (), states: Collection[TaskState] = ()) -> list:
    """Task rows with their job's budget columns: these tasks, or those of these workers in these states."""
    query = select(*task_columns(), tasks.c.preempt_epoch, *JOB_BUDGET_COLUMNS).select_from(
        tasks.join(jobs, tasks.c.job_id == jobs.c.id))
    if task_ids:
        query = query.where(tasks.c.id.in_(list(task_ids)))
    else:
        query = query.where(tasks.c.worker_id.in_(list(worker_ids)), tasks.c.state.in_([str(s) for s in states]))
    return list((await connection.execute(query)).all())


async def jobs_and_members(connection: AsyncConnection, job_ids: Collection[int]) -> tuple[list, dict[int, list]]:
    """Jobs (state, gang, cancelled, epoch, budgets) and their tasks (TaskRow columns and reason), by index."""
    ids = sorted(job_ids)
    job_rows = (await connection.execute(
        select(jobs.c.id, jobs.c.state, jobs.c.gang, jobs.c.cancelled, jobs.c.preemption_epoch,
               jobs.c.max_retries_failure, jobs.c.max_retries_preemption).where(jobs.c.id.in_(ids))
        .order_by(jobs.c.id))).all()
    members: dict[int, list] = defaultdict(list)
    for row in (await connection.execute(
        select(*task_columns(), tasks.c.reason).where(tasks.c.job_id.in_(ids)).order_by(tasks.c.index)
    )).all():
        members[row.job_id].append(row)
    return list(job_rows), members


async def job_for_cancel(connection: AsyncConnection, job_id: int):
    """A job's state and whether it is already cancelled; None when there is no such job."""
    return (await connection.execute(select(jobs.c.state, jobs.c.cancelled).where(jobs.c.id == job_id))).first()
