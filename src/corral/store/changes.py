"""The one write path for state: changes collected in memory, flushed in bulk, fenced.

Every task, job, deployment and replica state change in corral goes through a ChangeSet: it
checks the change against its entity's table (corral.core.states, corral.core.serving) for who
makes it (`by`: a handler or a reported fact), keeps the history record beside it with the event
type its row declares, and writes all of a handler run (or a heartbeat) with a few executemany
statements. Each update carries its expected current state (`WHERE state = :expected`), so a
write made against a stale read fails the whole transaction instead of overwriting (the fencing
check of DESIGN.md). A move no row allows raises IllegalTransition before anything is written.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from sqlalchemy import Table, Update, and_, bindparam, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.retries import RETRY_TRANSITIONS, RetryState
from corral.core.serving import DEPLOYMENT_TRANSITIONS, REPLICA_TRANSITIONS, DeploymentState, ReplicaState
from corral.core.states import JOB_TERMINAL, JOB_TRANSITIONS, TASK_TRANSITIONS, JobState, TaskState, Transitions
from corral.store.inserts import INSERT_AUDIT, INSERT_HISTORY
from corral.store.schema import attempts, deployments, history, jobs, replicas, tasks, wait_record


class StaleWrite(RuntimeError):
    """A fenced update found the row no longer in the state it was read in."""


@dataclass
class TaskRow:
    """The columns of a task the write path needs; mutated as changes are recorded."""

    id: int
    job_id: int
    index: int
    state: TaskState
    attempt: int
    worker_id: str | None
    failures: int = 0
    preemptions: int = 0


@dataclass
class ChangeSet:
    now: float
    _tasks: dict[int, tuple[TaskState, dict[str, Any]]] = field(default_factory=dict)
    _jobs: dict[int, tuple[JobState, dict[str, Any]]] = field(default_factory=dict)
    _deployments: dict[int, tuple[DeploymentState, dict[str, Any]]] = field(default_factory=dict)
    _replicas: dict[int, tuple[ReplicaState, dict[str, Any]]] = field(default_factory=dict)
    _waits: dict[tuple[int, str], str] = field(default_factory=dict)  # (job, handler) -> reason seen again
    _retries: dict[int, tuple[frozenset[str], dict[str, Any]]] = field(default_factory=dict)
    _audits: list[dict[str, Any]] = field(default_factory=list)
    _attempts_new: list[dict[str, Any]] = field(default_factory=list)
    _attempts_upd: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    _history: list[dict[str, Any]] = field(default_factory=list)
    _rows: dict[int, TaskRow] = field(default_factory=dict)  # the rows changed, as they are now
    touched_workers: set[str] = field(default_factory=set)
    touched_jobs: set[int] = field(default_factory=set)

    def task(
        self,
        row: TaskRow,
        new: TaskState,
        *,
        handler: str,
        by: str | None = None,
        result: str = "SUCCESS",
        message: str | None = None,
        **columns: Any,
    ) -> None:
        """Move a task to `new`, with extra columns and a history record: `by` (the handler, unless a fact made
        it) must be one the task table lets make the move."""
        move = TASK_TRANSITIONS.check(row.state, new, by or handler)
        self._rows[row.id] = row
        expected, values = self._tasks.get(row.id, (row.state, {}))
        values.update(columns, state=new, state_since=self.now)
        self._tasks[row.id] = (expected, values)
        self.record(row.job_id, handler, result, row.state, new, message, task=row, event=move.event)
        if row.worker_id:
            self.touched_workers.add(row.worker_id)
        row.state = new
        self.touched_jobs.add(row.job_id)

    def task_columns(self, row: TaskRow, **columns: Any) -> None:
        """Set columns of a task without a state change (budgets, placement)."""
        self._rows[row.id] = row
        expected, values = self._tasks.get(row.id, (row.state, {}))
        values.update(columns)
        values.setdefault("state", row.state)
        self._tasks[row.id] = (expected, values)

    def job(
        self,
        job_id: int,
        current: JobState,
        new: JobState,
        *,
        handler: str,
        by: str | None = None,
        result: str = "SUCCESS",
        message: str | None = None,
        **columns: Any,
    ) -> None:
        """Set a job's columns and, when `new` differs, move it (checked against the job table like a task)."""
        expected, values = self._jobs.get(job_id, (current, {}))
        if new is not current:
            move = JOB_TRANSITIONS.check(current, new, by or handler)
            values.update(state=new, state_since=self.now, tries=columns.get("tries", 0))
            if new in JOB_TERMINAL:
                values["finished_at"] = self.now
            self.record(job_id, handler, result, current, new, message, event=move.event)
        values.update(columns)
        values.setdefault("state", current)
        self._jobs[job_id] = (expected, values)
        self.touched_jobs.add(job_id)

    def job_columns(self, job_id: int, current: JobState, **columns: Any) -> None:
        self.job(job_id, current, current, handler="", **columns)

    def deployment(self, deployment_id: int, current: DeploymentState, new: DeploymentState, *, handler: str,
                   by: str | None = None, result: str = "SUCCESS", message: str | None = None,
                   **columns: Any) -> None:
        """Move a deployment (checked against its table), with columns and a history record."""
        move = self._move(self._deployments, DEPLOYMENT_TRANSITIONS, deployment_id, current, new, by or handler,
                          columns)
        self.record_serving(deployment_id, None, handler, result, current, new, message, event=move.event)

    def replica(self, replica_id: int, deployment_id: int, current: ReplicaState, new: ReplicaState, *,
                handler: str, by: str | None = None, result: str = "SUCCESS", message: str | None = None,
                **columns: Any) -> None:
        """Move a replica (checked against its table), with columns and a history record."""
        move = self._move(self._replicas, REPLICA_TRANSITIONS, replica_id, current, new, by or handler, columns)
        self.record_serving(deployment_id, replica_id, handler, result, current, new, message, event=move.event)

    def deployment_columns(self, deployment_id: int, current: DeploymentState, **columns: Any) -> None:
        """Set columns of a deployment without a state change (replicas wanted, keys, failed starts), fenced on
        the state it was read in."""
        self._columns(self._deployments, deployment_id, current, columns)

    def replica_columns(self, replica_id: int, current: ReplicaState, **columns: Any) -> None:
        """Set columns of a replica without a state change (its address), fenced on the state it was read in."""
        self._columns(self._replicas, replica_id, current, columns)

    @staticmethod
    def _columns(pending: dict, row_id: int, current: str, columns: dict[str, Any]) -> None:
        expected, values = pending.get(row_id, (current, {}))
        values.update(columns)
        values.setdefault("state", current)
        pending[row_id] = (expected, values)

    def _move(self, pending: dict, table: Transitions, row_id: int, current: str, new: str, by: str,
              columns: dict[str, Any]):
        move = table.check(current, new, by)
        expected, values = pending.get(row_id, (current, {}))
        values.update(columns, state=new, state_since=self.now)
        pending[row_id] = (expected, values)
        return move

    # What the set holds, read back: later steps of one transaction decide on state not yet written.

    def row(self, task_id: int) -> TaskRow | None:
        """A task this set changed, as it is now."""
        return self._rows.get(task_id)

    def moved_tasks(self, job_ids: Collection[int]) -> Iterator[tuple[TaskRow, TaskState]]:
        """Each task of these jobs that this set changed, as it is now, with the state it was read in."""
        for task_id, (expected, _) in self._tasks.items():
            row = self._rows[task_id]
            if row.job_id in job_ids:
                yield row, expected

    def task_value(self, task_id: int, column: str, read: Any) -> Any:
        """A task's column as this set leaves it (`read`: its value in the store)."""
        return self._tasks.get(task_id, (None, {}))[1].get(column, read)

    def job_value(self, job_id: int, column: str, read: Any) -> Any:
        """A job's column as this set leaves it (`read`: its value in the store)."""
        return self._jobs.get(job_id, (None, {}))[1].get(column, read)

    def retry(self, job_id: int, read: RetryState | frozenset[RetryState], new: RetryState, *, by: str,
              **columns: Any) -> None:
        """Move a job's retry chain (checked against RETRY_TRANSITIONS), fenced on the retry state it was read in
        (or any of several); its history record is the caller's, which knows the verdict's words and event."""
        sources = read if isinstance(read, frozenset) else frozenset({read})
        for source in sources:
            RETRY_TRANSITIONS.check(source, new, by)
        expected, values = self._retries.get(job_id, (frozenset(map(str, sources)), {}))
        values.update(columns, retry_state=new)
        self._retries[job_id] = (expected, values)

    def audit(self, **entry: Any) -> None:
        """An audit log entry (who did what to which job), written with the changes it accounts for."""
        self._audits.append(entry)

    def new_attempt(self, row: TaskRow, worker_id: str) -> None:
        self._attempts_new.append(dict(
            task_id=row.id, attempt=row.attempt, worker_id=worker_id, state=TaskState.ASSIGNED,
            exit_code=None, reason=None, assigned_at=self.now, started_at=None, finished_at=None,
        ))
        self.touched_workers.add(worker_id)

    def attempt(self, task_id: int, attempt: int, **columns: Any) -> None:
        self._attempts_upd.setdefault((task_id, attempt), {}).update(columns)

    def record(
        self,
        job_id: int,
        handler: str,
        result: str,
        from_state: str | None,
        to_state: str | None,
        message: str | None,
        task: TaskRow | None = None,
        event: str | None = None,
    ) -> None:
        self._history.append(dict(
            at=self.now, job_id=job_id, task_id=task.id if task else None,
            attempt=task.attempt if task else None, handler=handler, result=str(result),
            from_state=from_state, to_state=to_state, message=message, worker_id=task.worker_id if task else None,
            event=event,
        ))

    def record_serving(self, deployment_id: int, replica_id: int | None, handler: str, result: str,
                       from_state: str | None, to_state: str | None, message: str | None,
                       event: str | None = None) -> None:
        """A history record of a deployment (or of one of its replicas, with `replica_id`)."""
        self._history.append(dict(
            at=self.now, deployment_id=deployment_id, replica_id=replica_id, handler=handler, result=str(result),
            from_state=from_state and str(from_state), to_state=to_state and str(to_state), message=message,
            event=event,
        ))

    def wait(self, job_id: int, handler: str, state: str, reason: str, *, repeated: bool) -> None:
        """A job waits (SKIPPED): a new reason is a new record; the same reason again is counted on the job's last
        wait record of this handler, so every wait is on record without a row per pass."""
        if repeated:
            self._waits[(job_id, handler)] = reason
        else:
            self.record(job_id, handler, "SKIPPED", state, None, reason)

    def worker(self, worker_id: str, handler: str, from_state: str | None, to_state: str, message: str) -> None:
        """A history record of a worker's own state change (it has no job)."""
        self._history.append(dict(
            at=self.now, job_id=None, task_id=None, attempt=None, handler=handler, result="SUCCESS",
            from_state=from_state, to_state=to_state, message=message, worker_id=worker_id,
        ))

    def absorb(self, other: ChangeSet) -> None:
        """Take in the changes of another set, worked out apart (one job's), so that one that failed is left out."""
        for mine, theirs in ((self._tasks, other._tasks), (self._jobs, other._jobs),
                             (self._deployments, other._deployments), (self._replicas, other._replicas)):
            for row_id, (expected, values) in theirs.items():
                if row_id in mine:
                    mine[row_id][1].update(values)
                else:
                    mine[row_id] = (expected, values)
        self._attempts_new += other._attempts_new
        for key, values in other._attempts_upd.items():
            self._attempts_upd.setdefault(key, {}).update(values)
        self._history += other._history
        self._waits.update(other._waits)
        self._rows.update(other._rows)
        self._retries.update(other._retries)
        self._audits += other._audits
        self.touched_workers |= other.touched_workers
        self.touched_jobs |= other.touched_jobs

    @property
    def moved(self) -> bool:
        """Whether it changes anything but the count of a wait seen again (which wakes no one)."""
        return bool(self._tasks or self._jobs or self._deployments or self._replicas or self._attempts_new
                    or self._attempts_upd or self._history or self._retries or self._audits)

    @property
    def placed_workers(self) -> set[str]:
        """The workers this set places new attempts on: those whose capacity the transaction must fence."""
        return {attempt["worker_id"] for attempt in self._attempts_new}

    @property
    def empty(self) -> bool:
        return not (self.moved or self._waits)

    async def flush(self, connection: AsyncConnection) -> None:
        """Write everything in bulk, one statement per shape of update."""
        for (table, pending) in ((tasks, self._tasks), (jobs, self._jobs), (deployments, self._deployments),
                                 (replicas, self._replicas)):
            for columns, rows in _group_by_columns(pending).items():
                result = await connection.execute(_fenced_update(table, columns), rows)
                if result.rowcount == -1:  # the driver does not count executemany rows: read them back
                    await _verify(connection, table, rows)
                elif result.rowcount != len(rows):
                    raise StaleWrite(f"{table.name}: {len(rows) - result.rowcount} rows changed under us")
        if self._attempts_new:
            try:
                await connection.execute(_INSERT_ATTEMPTS, self._attempts_new)
            except IntegrityError as error:  # another controller's run placed the same attempt first
                raise StaleWrite(f"attempts: {_first_line(error.orig)}") from None
        for columns, rows in _group_attempts(self._attempts_upd).items():
            await connection.execute(_attempt_update(columns), rows)
        if self._history:
            await connection.execute(INSERT_HISTORY, _alike(self._history))
        for job_id, (expected, values) in self._retries.items():
            moved = await connection.execute(update(jobs).where(jobs.c.id == job_id, jobs.c.retry_state.in_(expected))
                                             .values(**values))
            if moved.rowcount != 1:
                raise StaleWrite(f"job {job_id}: its retry state changed under us")
        if self._audits:
            await connection.execute(INSERT_AUDIT, self._audits)
        if self._waits:
            await _count_waits(connection, self._waits, self.now)


def _alike(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows, each naming every column any of them names (one statement needs it): as they are where they all
    name the same ones (a report group's records of tasks and jobs), not copied."""
    first = rows[0].keys()
    if all(row.keys() == first for row in rows):
        return rows
    columns = set().union(*rows)
    return [dict.fromkeys(columns) | row for row in rows]


def _first_line(error: BaseException | None) -> str:
    return str(error).splitlines()[0] if error is not None and str(error) else "a key is taken"


# The flush's statements, each made once (for its shape of columns): every handler run and report flushes, and a
# statement made afresh cost more to build and to walk for SQLAlchemy's cache key than to run.
_INSERT_ATTEMPTS = insert(attempts)


@cache
def _fenced_update(table: Table, columns: tuple[str, ...]) -> Update:
    """An update of these columns of a row still in its expected state."""
    return (update(table)
            .where(and_(table.c.id == bindparam("_id"), table.c.state == bindparam("_expected")))
            .values({name: bindparam(f"v_{name}") for name in columns}))


@cache
def _attempt_update(columns: tuple[str, ...]) -> Update:
    return (update(attempts)
            .where(and_(attempts.c.task_id == bindparam("_task"), attempts.c.attempt == bindparam("_attempt")))
            .values({name: bindparam(f"v_{name}") for name in columns}))


_latest = history.alias("latest")
_COUNT_WAIT = (
    update(history)
    .where(history.c.id == select(func.max(_latest.c.id))
           .where(_latest.c.job_id == bindparam("_job"), _latest.c.handler == bindparam("_handler"),
                  wait_record(_latest))
           .scalar_subquery(),
           history.c.message == bindparam("_reason"))
    .values(repeats=history.c.repeats + 1, last_at=bindparam("_now"))
)
_COUNT_WAITS_ALIKE = (
    update(history)
    .where(history.c.id.in_(select(func.max(_latest.c.id))
                            .where(_latest.c.job_id.in_(bindparam("_jobs", expanding=True)),
                                   _latest.c.handler == bindparam("_handler"), wait_record(_latest))
                            .group_by(_latest.c.job_id)),
           history.c.message == bindparam("_reason"))
    .values(repeats=history.c.repeats + 1, last_at=bindparam("_now"))
)
WAITS_CHUNK = 5000  # job ids a statement of alike waits, under every driver's parameter limit
# Jobs sharing a reason that make a statement of their own; fewer ride as rows of the one executemany (callgrind of a
# placing run: a statement of 2 jobs cost some 0.3 M instructions more than their rows, one of 8 still 0.1 M more, one
# of 16 less).
ALIKE_FROM = 12


async def _count_waits(connection: AsyncConnection, waits: dict[tuple[int, str], str], now: float) -> None:
    """One more sighting on each job's latest wait record of the handler (when its reason is still the same), found
    by the latest id of the job's waits of the handler. A reason many jobs share (a queue that finds no room
    waits for one or a few) is counted by one statement for them all; the reasons of one job or a few each (a
    pipeline's "waiting for job N" names the job waited for, a fan-out's names it for its few children) by one
    statement of a row each, as before, so a graph of many small fan-outs costs no statement a reason."""
    alike: dict[tuple[str, str], list[int]] = {}
    for (job_id, handler), reason in waits.items():
        alike.setdefault((handler, reason), []).append(job_id)
    single = []
    for (handler, reason), job_ids in alike.items():
        if len(job_ids) < ALIKE_FROM:
            single.extend({"_job": job_id, "_handler": handler, "_reason": reason, "_now": now} for job_id in job_ids)
            continue
        for start in range(0, len(job_ids), WAITS_CHUNK):
            await connection.execute(_COUNT_WAITS_ALIKE, {"_jobs": job_ids[start:start + WAITS_CHUNK],
                                                          "_handler": handler, "_reason": reason, "_now": now})
    if single:
        await connection.execute(_COUNT_WAIT, single)


async def _verify(connection: AsyncConnection, table, rows: list[dict]) -> None:
    wanted = {row["_id"]: str(row["v_state"]) for row in rows}
    found = dict((await connection.execute(
        select(table.c.id, table.c.state).where(table.c.id.in_(list(wanted)))
    )).all())
    stale = [row_id for row_id, state in wanted.items() if found.get(row_id) != state]
    if stale:
        raise StaleWrite(f"{table.name}: rows {stale} changed under us")


class _ValueNames(dict):
    """A column's name as its value's parameter (`v_<name>`), made once rather than for each row."""

    def __missing__(self, name: str) -> str:
        self[name] = f"v_{name}"
        return self[name]


_V = _ValueNames()


def _group_by_columns(pending: dict[int, tuple[Any, dict[str, Any]]]) -> dict[tuple[str, ...], list[dict]]:
    grouped: dict[tuple[str, ...], list[dict]] = {}
    for row_id, (expected, values) in pending.items():
        columns = tuple(sorted(values))
        row = {"_id": row_id, "_expected": str(expected)}
        for name, value in values.items():
            row[_V[name]] = value
        grouped.setdefault(columns, []).append(row)
    return grouped


def _group_attempts(pending: dict[tuple[int, int], dict[str, Any]]) -> dict[tuple[str, ...], list[dict]]:
    grouped: dict[tuple[str, ...], list[dict]] = {}
    for (task_id, attempt), values in pending.items():
        row = {"_task": task_id, "_attempt": attempt}
        for name, value in values.items():
            row[_V[name]] = value
        grouped.setdefault(tuple(sorted(values)), []).append(row)
    return grouped
