"""The reads a handler run needs: its targets, in one query (a placing handler also reads scheduling_reads), and
what settling a job reads."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection
from functools import cache
from itertools import groupby
from operator import itemgetter
from typing import NamedTuple

from sqlalchemy import (
    Integer,
    and_,
    bindparam,
    cast,
    exists,
    false,
    func,
    literal_column,
    null,
    or_,
    select,
    true,
    union_all,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.states import JobState, TaskState
from corral.store.changes import TaskRow
from corral.store.retries import RETRY_WANTED
from corral.store.schema import jobs, tasks

BATCH_ROWS = 10_000  # a handler run fetches at most this many task rows; the rest wait a pass
TASK_TARGET_JOB_STATES = (JobState.PENDING, JobState.RUNNING)  # the independent jobs whose tasks are targets

# A target task row, by position (a database row answers a position as fast as a tuple, a column name some twenty
# times slower): these task columns, then two of NULL (four more with launcher columns).
TASK_SLOTS = ("job_id", "index", "id", "state", "state_since", "tries", "attempt", "worker_id", "failures",
              "preemptions", "cpu", "memory", "gpu")
(T_JOB_ID, T_INDEX, T_ID, T_STATE, T_SINCE, T_TRIES, T_ATTEMPT, T_WORKER_ID, T_FAILURES, T_PREEMPTIONS, T_CPU, T_MEMORY,
 T_GPU) = range(len(TASK_SLOTS))


class TargetJob(NamedTuple):
    """A target job's columns (and its launcher's, with `launcher_states`). Its row is read once, before its first
    task row (in the place of the index, -1), its columns in the places of task columns of the same type
    (`_target_job`), as a union needs on PostgreSQL (booleans read as integers)."""

    job_id: int
    job_state: str
    gang: bool
    job_tries: int
    job_since: float
    max_task_failures: int
    scheduling_timeout: float | None
    pending_reason: str | None
    outcome: str | None
    cancelled: bool
    max_retries_failure: int
    max_retries_preemption: int
    grace_period: float
    preemption_epoch: int
    launcher_id: int | None = None
    launcher_state: str | None = None
    launcher_cancelled: bool | None = None
    launcher_outcome: str | None = None


async def target_rows(
    connection: AsyncConnection,
    job_states: Collection[JobState],
    gang_only: bool,
    task_states: Collection[TaskState],
    launcher_states: Collection[JobState] = (),
    limit: int = BATCH_ROWS,
) -> list[tuple[TargetJob, list]]:
    """The targets' jobs, each with its task rows (by position, `TASK_SLOTS`), in submission order: of whole-job
    targets every task, of task targets those in `task_states`. At most `limit` task rows: a job they cut off is left
    to the next pass (unless it is the only one).

    With `launcher_states`, only jobs launched by a job in one of them, with that job's columns.

    One statement (one snapshot on PostgreSQL; a second, ordered, only where there are more rows than the limit
    needs), a union of the task rows and their jobs' rows: each job's columns are read once, not repeated on each of
    its task rows (a pass over 10,000 pending tasks read 260,000 values, now 150,000)."""
    unordered, ordered = _target_statements(frozenset(job_states), gang_only, frozenset(task_states),
                                            frozenset(launcher_states), limit)
    # Where the rows the limit needs are all the rows there are, they are read unordered and sorted here: SQLite
    # sorts each half of the union in a temporary tree and merges them (some 5 ms of 10,000 pending tasks), a list
    # of them sorts in about a third of that. Only past that many is the database asked for the first of them in
    # order. Either statement's rows are used alone: one snapshot on PostgreSQL.
    rows = (await connection.execute(unordered)).all()
    if len(rows) > 2 * limit:
        rows = (await connection.execute(ordered)).all()
    else:
        rows.sort(key=itemgetter(T_JOB_ID, T_INDEX))
    found: list[tuple[TargetJob, list]] = []
    read = 0
    for _, group in groupby(rows, itemgetter(T_JOB_ID)):
        job, *members = group
        if job[T_INDEX] != -1:
            raise RuntimeError(f"job {job[T_JOB_ID]}: its task rows were read without its row")
        if read + len(members) >= limit:
            found.append((_target_job(job), members[:limit - read]))
            read = limit
            break
        if members:  # (a job's row is read without task rows only where the limit cuts them off)
            found.append((_target_job(job), members))
            read += len(members)
    if read == limit and len(found) > 1:
        found.pop()  # its tasks may be cut off: leave the whole job to the next pass
    return found


@cache
def _target_statements(job_states: frozenset[JobState], gang_only: bool, task_states: frozenset[TaskState],
                       launcher_states: frozenset[JobState], limit: int):
    """`target_rows`' statements: the rows unordered (one more than the limit needs, to tell whether there are
    more) and the first of them in order. Made once for each handler's arguments: SQLAlchemy then neither builds
    them again nor walks them for their cache key on every run (a statement keeps its key once made)."""
    whole = and_(jobs.c.state.in_([str(s) for s in job_states]), jobs.c.gang if gang_only else true())
    job_of_tasks = and_(jobs.c.gang.is_(False), jobs.c.state.in_([str(s) for s in TASK_TARGET_JOB_STATES]))
    per_task = and_(job_of_tasks, tasks.c.state.in_([str(s) for s in task_states])) if task_states else false()
    where = or_(whole if job_states else false(), per_task)
    jobs_where = or_(whole if job_states else false(), job_of_tasks if task_states else false())
    source, job_source, launcher_columns = tasks.join(jobs, tasks.c.job_id == jobs.c.id), jobs, ()
    if launcher_states:
        launcher = jobs.alias("launcher")
        source = source.join(launcher, jobs.c.launched_by == launcher.c.id)
        job_source = jobs.join(launcher, jobs.c.launched_by == launcher.c.id)
        where = and_(where, launcher.c.state.in_([str(s) for s in launcher_states]))
        launcher_columns = (launcher.c.id, launcher.c.state, cast(launcher.c.cancelled, Integer), launcher.c.outcome)
    task_rows = select(
        *(tasks.c[name].label(name) for name in TASK_SLOTS), null(), null(), *(null() for _ in launcher_columns),
    ).select_from(source).where(where)
    # The jobs that have a task row above (`where` of each job's tasks, found by the job's own index).
    job_rows = select(
        jobs.c.id, literal_column("-1", Integer), jobs.c.tries, jobs.c.state, jobs.c.state_since,
        jobs.c.max_task_failures, jobs.c.max_retries_failure, jobs.c.pending_reason, jobs.c.max_retries_preemption,
        jobs.c.preemption_epoch, jobs.c.scheduling_timeout, cast(jobs.c.gang, Integer), jobs.c.grace_period,
        jobs.c.outcome, cast(jobs.c.cancelled, Integer), *launcher_columns,
    ).select_from(job_source).where(jobs_where, exists().where(tasks.c.job_id == jobs.c.id, where))
    both = union_all(task_rows, job_rows)
    # Each job row comes before its first task row, so the first `limit` task rows lie within twice as many rows.
    return (both.limit(2 * limit + 1),
            both.order_by(both.selected_columns.job_id, both.selected_columns.index).limit(2 * limit))


def _target_job(row) -> TargetJob:
    (job_id, _, tries, state, since, max_task_failures, max_retries_failure, pending_reason, max_retries_preemption,
     epoch, scheduling_timeout, gang, grace_period, outcome, cancelled, *launcher) = row
    if launcher:
        launcher[2] = bool(launcher[2])
    return TargetJob(job_id, state, bool(gang), tries, since, max_task_failures, scheduling_timeout, pending_reason,
                     outcome, bool(cancelled), max_retries_failure, max_retries_preemption, grace_period, epoch,
                     *launcher)


async def present_states(connection: AsyncConnection,
                         job_states: Collection[JobState]) -> set[tuple[str, bool, str, bool]]:
    """Which (job state, gang, task state, launched by a job) there are rows of, among jobs in `job_states`: what a
    pass reads once to know which handlers could have targets at all (one query, not a transaction per handler)."""
    return {(row.state, row.gang, row.task_state, row.launched)
            for row in (await connection.execute(_present_statement(frozenset(job_states)))).all()}


@cache
def _present_statement(job_states: frozenset[JobState]):
    """`present_states`' statement, made once for each set of job states (every engine pass runs it)."""
    return (select(jobs.c.state, jobs.c.gang, tasks.c.state.label("task_state"),
                   jobs.c.launched_by.is_not(None).label("launched")).distinct()
            .select_from(tasks.join(jobs, tasks.c.job_id == jobs.c.id))
            .where(jobs.c.state.in_([str(s) for s in job_states])))


async def present_and_retries(connection: AsyncConnection, job_states: Collection[JobState],
                              now: float) -> tuple[set[tuple[str, bool, str, bool]], bool]:
    """`present_states`, and whether RetryJobs has a target at `now` (`RETRY_WANTED`), in one statement: an engine
    pass reads both before it runs anything, and again after each run that moved something; two statements were
    two round trips through the connection's thread, a good part of a statement's cost."""
    states, wanted = set(), False
    for row in (await connection.execute(_present_and_retries(frozenset(job_states)), {"now": now})).all():
        if row.state is None:  # the marker row: some job wants a retry
            wanted = True
        else:
            states.add((row.state, row.gang, row.task_state, row.launched))
    return states, wanted


@cache
def _present_and_retries(job_states: frozenset[JobState]):
    """`present_states`' rows, then one row of NULLs where some job wants a retry (no job row has a NULL state)."""
    return union_all(_present_statement(job_states),
                     select(null(), null(), null(), null()).where(exists().where(RETRY_WANTED)))


# A task (job) state by its stored name: a dictionary answers in a tenth of the time the enum's own lookup takes, which
# counts when a run reads every row of a large job (every job of a pass over a thousand pending jobs).
TASK_STATES = {str(state): state for state in TaskState}
JOB_STATES = {str(state): state for state in JobState}


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
    ids = {"ids": sorted(job_ids)}
    counts: dict[int, Counter] = defaultdict(Counter)
    if connection.dialect.name == "sqlite":  # one writer: nothing to lock, so the rows and counts are one statement
        job_rows = []
        for row in (await connection.execute(_SETTLE_JOBS_COUNTED, ids)).all():
            if not job_rows or job_rows[-1].id != row.id:
                job_rows.append(row)
            if row.task_state is not None:
                counts[row.id][TASK_STATES[row.task_state]] = row.n
        return job_rows, counts
    job_rows = (await connection.execute(_SETTLE_JOBS, ids)).all()
    for row in (await connection.execute(_SETTLE_COUNTS, ids)).all():
        counts[row.job_id][TaskState(row.state)] = row.n
    return job_rows, counts


# Statements every handler run or report that moves a task runs, made once (the jobs' ids an expanding parameter):
# made afresh, each cost more to build and to walk for SQLAlchemy's cache key than to run.
_SETTLE_JOBS = (select(jobs.c.id, jobs.c.state, jobs.c.gang, jobs.c.outcome, jobs.c.cancelled, jobs.c.max_task_failures)
                .where(jobs.c.id.in_(bindparam("ids", expanding=True))).order_by(jobs.c.id).with_for_update())
_SETTLE_COUNTS = (select(tasks.c.job_id, tasks.c.state, func.count().label("n"))
                  .where(tasks.c.job_id.in_(bindparam("ids", expanding=True))).group_by(tasks.c.job_id, tasks.c.state))
# On SQLite, both in one statement: each job's columns on each of its task states' counts, in the jobs' order (a job
# of no task one row of a NULL state). PostgreSQL cannot lock the rows of a grouped read: there, two statements.
_SETTLE_JOBS_COUNTED = (select(*_SETTLE_JOBS.selected_columns, tasks.c.state.label("task_state"),
                               func.count(tasks.c.id).label("n"))
                        .select_from(jobs.outerjoin(tasks, tasks.c.job_id == jobs.c.id))
                        .where(jobs.c.id.in_(bindparam("ids", expanding=True)))
                        .group_by(jobs.c.id, tasks.c.state).order_by(jobs.c.id))
_PENDING_TASKS = select(*task_columns()).where(tasks.c.job_id.in_(bindparam("ids", expanding=True)),
                                               tasks.c.state == TaskState.PENDING)


async def pending_tasks(connection: AsyncConnection, job_ids: Collection[int]) -> list[TaskRow]:
    return [task_row(row) for row in (await connection.execute(_PENDING_TASKS, {"ids": list(job_ids)})).all()]


# The columns of a task's job that end_attempt reads (corral.engine.attempts).
JOB_BUDGET_COLUMNS = (jobs.c.gang, jobs.c.state.label("job_state"), jobs.c.cancelled,
                      jobs.c.max_retries_failure, jobs.c.max_retries_preemption)


async def tasks_with_budgets(connection: AsyncConnection, *, task_ids: Collection[int] = (),
                             worker_ids: Collection[str] = (), states: Collection[TaskState] = ()) -> list:
    """Task rows with their job's budget columns: these tasks, or those of these workers in these states."""
    if task_ids:
        return list((await connection.execute(_BUDGETS_OF_TASKS, {"ids": list(task_ids)})).all())
    return list((await connection.execute(_BUDGETS_OF_WORKERS, {"workers": list(worker_ids),
                                                                "states": [str(s) for s in states]})).all())


# `tasks_with_budgets`' two statements, made once (every report of a task's end runs one).
_WITH_BUDGETS = select(*task_columns(), tasks.c.preempt_epoch, *JOB_BUDGET_COLUMNS).select_from(
    tasks.join(jobs, tasks.c.job_id == jobs.c.id))
_BUDGETS_OF_TASKS = _WITH_BUDGETS.where(tasks.c.id.in_(bindparam("ids", expanding=True)))
_BUDGETS_OF_WORKERS = _WITH_BUDGETS.where(tasks.c.worker_id.in_(bindparam("workers", expanding=True)),
                                          tasks.c.state.in_(bindparam("states", expanding=True)))


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
