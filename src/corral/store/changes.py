"""The one write path for state: changes collected in memory, flushed in bulk, fenced.

Every task or job state change in corral goes through a ChangeSet: it checks the change
against the transition table, keeps the history record beside it, and writes all of a
handler run (or a heartbeat) with a few executemany statements. Each update carries its
expected current state (`WHERE state = :expected`), so a write made against a stale read
fails the whole transaction instead of overwriting (the fencing check of DESIGN.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, bindparam, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.states import JOB_TERMINAL, JobState, TaskState, check_task_transition
from corral.store.schema import attempts, history, jobs, tasks


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
    _attempts_new: list[dict[str, Any]] = field(default_factory=list)
    _attempts_upd: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    _history: list[dict[str, Any]] = field(default_factory=list)
    touched_workers: set[str] = field(default_factory=set)
    touched_jobs: set[int] = field(default_factory=set)

    def task(
        self,
        row: TaskRow,
        new: TaskState,
        *,
        handler: str,
        result: str = "SUCCESS",
        message: str | None = None,
        **columns: Any,
    ) -> None:
        """Move a task to `new` (legal rows only), with extra columns and a history record."""
        check_task_transition(row.state, new)
        expected, values = self._tasks.get(row.id, (row.state, {}))
        values.update(columns, state=new, state_since=self.now)
        self._tasks[row.id] = (expected, values)
        self.record(row.job_id, handler, result, row.state, new, message, task=row)
        if row.worker_id:
            self.touched_workers.add(row.worker_id)
        row.state = new
        self.touched_jobs.add(row.job_id)

    def task_columns(self, row: TaskRow, **columns: Any) -> None:
        """Set columns of a task without a state change (budgets, placement)."""
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
        result: str = "SUCCESS",
        message: str | None = None,
        **columns: Any,
    ) -> None:
        expected, values = self._jobs.get(job_id, (current, {}))
        values.update(columns)
        if new is not current:
            values.update(state=new, state_since=self.now, tries=columns.get("tries", 0))
            if new in JOB_TERMINAL:
                values["finished_at"] = self.now
            self.record(job_id, handler, result, current, new, message)
        values.setdefault("state", current)
        self._jobs[job_id] = (expected, values)
        self.touched_jobs.add(job_id)

    def job_columns(self, job_id: int, current: JobState, **columns: Any) -> None:
        self.job(job_id, current, current, handler="", **columns)

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
    ) -> None:
        self._history.append(dict(
            at=self.now, job_id=job_id, task_id=task.id if task else None,
            attempt=task.attempt if task else None, handler=handler, result=result,
            from_state=from_state, to_state=to_state, message=message, worker_id=task.worker_id if task else None,
        ))

    def worker(self, worker_id: str, handler: str, from_state: str | None, to_state: str, message: str) -> None:
        """A history record of a worker's own state change (it has no job)."""
        self._history.append(dict(
            at=self.now, job_id=None, task_id=None, attempt=None, handler=handler, result="SUCCESS",
            from_state=from_state, to_state=to_state, message=message, worker_id=worker_id,
        ))

    def absorb(self, other: ChangeSet) -> None:
        """Take in the changes of another set, worked out apart (one job's), so that one that failed is left out."""
        for mine, theirs in ((self._tasks, other._tasks), (self._jobs, other._jobs)):
            for row_id, (expected, values) in theirs.items():
                if row_id in mine:
                    mine[row_id][1].update(values)
                else:
                    mine[row_id] = (expected, values)
        self._attempts_new += other._attempts_new
        for key, values in other._attempts_upd.items():
            self._attempts_upd.setdefault(key, {}).update(values)
        self._history += other._history
        self.touched_workers |= other.touched_workers
        self.touched_jobs |= other.touched_jobs

    @property
    def empty(self) -> bool:
        return not (self._tasks or self._jobs or self._attempts_new or self._attempts_upd or self._history)

    async def flush(self, connection: AsyncConnection) -> None:
        """Write everything in bulk, one statement per shape of update."""
        for (table, pending) in ((tasks, self._tasks), (jobs, self._jobs)):
            for columns, rows in _group_by_columns(pending).items():
                statement = (
                    update(table)
                    .where(and_(table.c.id == bindparam("_id"), table.c.state == bindparam("_expected")))
                    .values({name: bindparam(f"v_{name}") for name in columns})
                )
                result = await connection.execute(statement, rows)
                if result.rowcount == -1:  # the driver does not count executemany rows: read them back
                    await _verify(connection, table, rows)
                elif result.rowcount != len(rows):
                    raise StaleWrite(f"{table.name}: {len(rows) - result.rowcount} rows changed under us")
        if self._attempts_new:
            await connection.execute(insert(attempts), self._attempts_new)
        for columns, rows in _group_attempts(self._attempts_upd).items():
            statement = (
                update(attempts)
                .where(and_(attempts.c.task_id == bindparam("_task"), attempts.c.attempt == bindparam("_attempt")))
                .values({name: bindparam(f"v_{name}") for name in columns})
            )
            await connection.execute(statement, rows)
        if self._history:
            columns = set().union(*self._history)  # one statement needs every row to name every column
            await connection.execute(insert(history), [dict.fromkeys(columns) | row for row in self._history])


async def _verify(connection: AsyncConnection, table, rows: list[dict]) -> None:
    wanted = {row["_id"]: str(row["v_state"]) for row in rows}
    found = dict((await connection.execute(
        select(table.c.id, table.c.state).where(table.c.id.in_(list(wanted)))
    )).all())
    stale = [row_id for row_id, state in wanted.items() if found.get(row_id) != state]
    if stale:
        raise StaleWrite(f"{table.name}: rows {stale} changed under us")


def _group_by_columns(pending: dict[int, tuple[Any, dict[str, Any]]]) -> dict[tuple[str, ...], list[dict]]:
    grouped: dict[tuple[str, ...], list[dict]] = {}
    for row_id, (expected, values) in pending.items():
        columns = tuple(sorted(values))
        grouped.setdefault(columns, []).append(
            {"_id": row_id, "_expected": str(expected), **{f"v_{k}": v for k, v in values.items()}}
        )
    return grouped


def _group_attempts(pending: dict[tuple[int, int], dict[str, Any]]) -> dict[tuple[str, ...], list[dict]]:
    grouped: dict[tuple[str, ...], list[dict]] = {}
    for (task_id, attempt), values in pending.items():
        grouped.setdefault(tuple(sorted(values)), []).append(
            {"_task": task_id, "_attempt": attempt, **{f"v_{k}": v for k, v in values.items()}}
        )
    return grouped
