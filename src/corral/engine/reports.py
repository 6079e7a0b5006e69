"""Worker reports and worker loss: the two ways the world outside changes task states, as reported facts.

A heartbeat is one transaction and one flush: its reports, the drains they start and the jobs they settle.
A report asks for a move; the task table says whether a worker may make it. One that asks for a move only the
controller makes (placing, stopping, preempting, retrying, declaring a worker lost) is refused as a whole
heartbeat (Refused: 409) and recorded; one about a task the controller has moved on from (a stop crossed
the report) is stale and changes nothing, as a repeat does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from corral.core.attempt_world import CachedEnvironment
from corral.core.drain import end_while_preempting, starts_drain
from corral.core.protocol import GpuUse, RegisterRequest, TaskReport
from corral.core.states import TASK_HOLDS_RESOURCES, TASK_TERMINAL, TASK_TRANSITIONS, Fact, TaskState, WorkerState
from corral.engine.attempts import end_attempt
from corral.engine.drain import start_drains
from corral.engine.settle import settle_jobs
from corral.store.changes import ChangeSet, TaskRow
from corral.store.off_loop import converted
from corral.store.reads import task_row, tasks_with_budgets
from corral.store.worker_state import (
    forget_lost,
    insert_worker,
    mark_all_seen,
    mark_lost,
    mark_seen,
    silent_workers,
)
from corral.waiting import woken

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from corral.store.store import Store

log = logging.getLogger("corral.reports")

# The states a worker's report may ever ask for; any other is a move only the controller makes.
REPORTABLE = frozenset(move.target for move in TASK_TRANSITIONS.moves if move.by == Fact.WORKER)


class UnknownWorker(LookupError):
    """The worker is not registered, or was declared lost: it must re-register."""


@dataclass(frozen=True)
class Refusal:
    task_id: int
    attempt: int
    state: TaskState
    why: str


class Refused(ValueError):
    """Reports that ask for moves only the controller makes: the heartbeat is refused, nothing of it applied."""

    def __init__(self, refusals: list[Refusal]) -> None:
        super().__init__("; ".join(f"task {r.task_id} attempt {r.attempt}: {r.why}" for r in refusals))
        self.refusals = refusals


async def register_worker(connection: AsyncConnection, request: RegisterRequest, now: float) -> str:
    """A new worker id each time; a LOST row under the same name is the same machine come back, and goes."""
    worker_id, replaced = await insert_worker(connection, request, now)
    registered = ChangeSet(now)
    capacity = request.capacity
    registered.worker(worker_id, "Register", None, WorkerState.ALIVE,
                      f"{request.name} at {request.address}: {capacity.cpu:g} CPU, {capacity.memory} B memory, "
                      f"{capacity.gpu} GPU" + (f"; replaces lost {', '.join(sorted(replaced))}" if replaced else ""))
    await registered.flush(connection)
    return worker_id


async def prune_lost_workers(connection: AsyncConnection, before: float) -> int:
    """Forget LOST workers not heard from since `before` (their history stays): the list does not grow forever."""
    pruned = await forget_lost(connection, before)
    if pruned:
        log.info("forgot %d worker(s) lost before %.0f", pruned, before)
    return pruned


# How often the marks of heartbeats answered without waiting are written: a worker's recorded last heartbeat trails
# its latest by about this much (and the time a write takes), and is then when that heartbeat came, to MARK_STEP.
WRITE_MARKS_EVERY = 1.0
# Those marks' times are rounded down to this step: the marks of a period take a statement per step, not one per
# worker (a statement with a time per worker took 13 ms of the loop's CPU to compile for 500 workers).
MARK_STEP = 0.25


class SeenMarks:
    """Heartbeats that carry nothing but the worker's liveness, written together: the marks that arrive while one
    transaction is being written go in the next, one statement and one commit for them all (a group commit),
    rather than one transaction each, queued one by one behind the single writer, and before the other writes waiting
    for it (a liveness write).

    A worker whose mark this controller saw committed, ALIVE, less than half the loss timeout ago is answered at
    once: only the reaper moves a worker out of ALIVE, and only once its recorded last heartbeat is a loss timeout
    old, which that mark cannot be yet (the other half is the margin for the controllers' clocks and a late write).
    Its mark, the time the heartbeat came (rounded down to MARK_STEP), is written with the others within
    WRITE_MARKS_EVERY, so the reaper judges the same heartbeat as when each was written before its answer. Any other
    worker (unknown here, or confirmed too long ago) is answered only once its mark is committed, and refused when it
    is unknown or LOST."""

    def __init__(self, store: Store, loss_timeout: float, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock  # when a heartbeat came (a test moves it on)
        self.trusted_for = loss_timeout / 2
        self._waiting: dict[str, list[asyncio.Future[bool]]] = defaultdict(list)
        self._unwritten: dict[str, float] = {}  # worker -> when its latest heartbeat answered at once came
        self._confirmed: dict[str, float] = {}  # worker -> its latest mark committed with the worker ALIVE
        self._urgent = asyncio.Event()  # a heartbeat waits for its mark: write now, not at the next period
        self._writer: asyncio.Task | None = None

    async def seen(self, worker_id: str) -> None:
        """Mark the worker seen now; raises UnknownWorker when it is not registered, or was declared lost."""
        now = self.clock()
        if now - self._confirmed.get(worker_id, -math.inf) < self.trusted_for:
            self._unwritten[worker_id] = math.floor(now / MARK_STEP) * MARK_STEP
            self._start_writer()
            return
        marked = asyncio.get_running_loop().create_future()
        self._waiting[worker_id].append(marked)
        self._urgent.set()
        self._start_writer()
        if not await marked:
            raise UnknownWorker(worker_id)

    async def close(self) -> None:
        """Write the marks not yet written, then stop (a stopping controller's last moment of service is recorded
        as it was); a write that does not end within a few periods is given up."""
        if self._writer is None or self._writer.done():
            return
        self._urgent.set()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5 * WRITE_MARKS_EVERY):
                await asyncio.shield(self._writer)
        self._writer.cancel()

    def _start_writer(self) -> None:
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write())

    async def _write(self) -> None:
        while self._waiting or self._unwritten:
            if not self._waiting:
                await woken(self._urgent, WRITE_MARKS_EVERY)
            self._urgent.clear()
            waiting, self._waiting = self._waiting, defaultdict(list)
            unwritten, self._unwritten = self._unwritten, {}
            marks = unwritten | dict.fromkeys(waiting, self.clock())
            try:
                async with self.store.write(moves_state=False, liveness=True) as connection:
                    alive = await mark_all_seen(connection, marks)
            except Exception as error:
                self._unwritten = unwritten | self._unwritten  # written with the next; a later heartbeat's time wins
                for futures in waiting.values():
                    for future in futures:
                        if not future.done():
                            future.set_exception(error)
                continue
            self._confirm(marks, alive)
            for worker_id, futures in waiting.items():
                for future in futures:
                    if not future.done():  # its request may have gone meanwhile
                        future.set_result(worker_id in alive)

    def _confirm(self, marks: dict[str, float], alive: set[str]) -> None:
        """Note the marks committed ALIVE; forget the workers that are not, and those confirmed too long ago to be
        trusted (lost workers never come back under the same id)."""
        for worker_id, heard in marks.items():
            if worker_id in alive:
                self._confirmed[worker_id] = max(heard, self._confirmed.get(worker_id, heard))
            else:
                self._confirmed.pop(worker_id, None)
        too_old = self.clock() - self.trusted_for
        for worker_id in [w for w, confirmed in self._confirmed.items() if confirmed < too_old]:
            del self._confirmed[worker_id]


@dataclass(frozen=True)
class Heartbeat:
    """A worker's heartbeat as the engine applies it: its reports, and the facts it sends when they change (its
    cached environments, its Pythons, its devices' use)."""

    worker_id: str
    reports: list[TaskReport]
    environments: list[CachedEnvironment] | None = None
    pythons: list[str] | None = None
    gpus: list[GpuUse] | None = None

    @property
    def facts(self) -> dict[str, Any]:
        """The worker row's columns the facts it sent set."""
        facts: dict[str, Any] = {}
        if self.environments is not None:
            facts["environments"] = [e.model_dump() for e in self.environments]
        if self.pythons is not None:
            facts["pythons"] = self.pythons
        if self.gpus:
            facts["gpu_readings"] = [gpu.model_dump() for gpu in self.gpus]
        return facts


@dataclass(frozen=True)
class Ingested:
    """What a group of heartbeats applied together changed, and whose they were (they read their orders after it;
    the others it touched are rung)."""

    changes: ChangeSet
    reporters: frozenset[str]


async def ingest_group(connection: AsyncConnection, heartbeats: list[Heartbeat]) -> list[Ingested]:
    """Concurrent heartbeats applied in one transaction (the controller's GroupedWrites of reports): the same
    answer for each."""
    ingested = Ingested(await ingest_heartbeats(connection, heartbeats, time.time()),
                        frozenset(heartbeat.worker_id for heartbeat in heartbeats))
    return [ingested] * len(heartbeats)


async def ingest_heartbeat(
    connection: AsyncConnection, worker_id: str, reports: list[TaskReport], now: float,
    environments: list[CachedEnvironment] | None = None, pythons: list[str] | None = None,
    gpus: list[GpuUse] | None = None,
) -> ChangeSet:
    """One worker's heartbeat, applied alone (ingest_heartbeats)."""
    return await ingest_heartbeats(connection, [Heartbeat(worker_id, reports, environments, pythons, gpus)], now)


async def ingest_heartbeats(connection: AsyncConnection, heartbeats: Sequence[Heartbeat], now: float) -> ChangeSet:
    """Mark the workers seen (with the facts they sent) and apply their reports in order, with what follows from
    them, in one ChangeSet; stale or repeated ones change nothing. Raises UnknownWorker when one of the workers is
    not registered or was declared lost, Refused when a report asks for a move no worker may make: nothing of any
    of them is then applied (the transaction is the caller's to roll back).

    Several workers' heartbeats in one call cost the statements of one: a report transaction holds the single
    writer for its statements' round trips through the event loop, far more than for its rows."""
    await _mark_seen(connection, heartbeats, now)
    changes = ChangeSet(now)
    for heartbeat in heartbeats:
        if heartbeat.pythons is not None:  # a fact placement reads (python constraints): on record for the index
            changes.worker(heartbeat.worker_id, "Heartbeat", WorkerState.ALIVE, WorkerState.ALIVE,
                           f"found Pythons: {', '.join(heartbeat.pythons) or 'none'}")
    task_ids = {report.task_id for heartbeat in heartbeats for report in heartbeat.reports}
    if not task_ids:
        await changes.flush(connection)
        return changes
    rows = {row.id: row for row in await tasks_with_budgets(connection, task_ids=task_ids)}
    reports = sum(len(heartbeat.reports) for heartbeat in heartbeats)
    triggers = await converted(reports, _moves, changes, heartbeats, rows)
    await start_drains(connection, changes, triggers)
    await settle_jobs(connection, changes, changes.touched_jobs, Fact.WORKER)
    await changes.flush(connection)
    return changes


async def _mark_seen(connection: AsyncConnection, heartbeats: Sequence[Heartbeat], now: float) -> None:
    """Mark the heartbeats' workers seen, with their facts; UnknownWorker for the first not ALIVE. Alone, one
    statement; several are marked together (in id order: mark_all_seen), then the facts of those that sent any."""
    if len(heartbeats) == 1:
        alone = heartbeats[0]
        alive = {alone.worker_id} if await mark_seen(connection, alone.worker_id, now, **alone.facts) else set()
    else:
        alive = await mark_all_seen(connection, dict.fromkeys((heartbeat.worker_id for heartbeat in heartbeats), now))
        for heartbeat in heartbeats:
            if heartbeat.worker_id in alive and (facts := heartbeat.facts):
                await mark_seen(connection, heartbeat.worker_id, now, **facts)
    for heartbeat in heartbeats:
        if heartbeat.worker_id not in alive:
            raise UnknownWorker(heartbeat.worker_id)


def _moves(changes: ChangeSet, heartbeats: Sequence[Heartbeat], rows: dict) -> dict[int, list[int]]:
    """Add the reports' moves to `changes`, worked out from the task rows read, and return the drains they start
    (gang job id -> ids of the members that ended); Refused, with nothing added, when one asks for a move no worker
    may make. Pure: a group of some fifty heartbeats (a thousand moves, each checked, their attempts ended) held
    the event loop for hundreds of milliseconds while polls came due, so a large one runs in a thread."""
    current = {task_id: task_row(row) for task_id, row in rows.items()}
    refusals = [refusal for heartbeat in heartbeats for report in heartbeat.reports
                if (refusal := _refusal(report, current.get(report.task_id), rows))]
    if refusals:
        raise Refused(refusals)
    triggers: dict[int, list[int]] = defaultdict(list)
    for heartbeat in heartbeats:
        for report in heartbeat.reports:
            _apply(changes, triggers, heartbeat.worker_id, report, current.get(report.task_id), rows)
    return triggers


def _apply(changes: ChangeSet, triggers: dict[int, list[int]], worker_id: str, report: TaskReport,
           row: TaskRow | None, rows: dict) -> None:
    """Add what one report moves to `changes` (a terminal move of a gang member to `triggers`, the drains it
    starts); nothing when it is not the worker's task, or stale, or a repeat."""
    if row is None or row.worker_id != worker_id or row.attempt != report.attempt or row.state is report.state:
        return
    if report.state is TaskState.PREEMPTED:
        log.warning("task %s attempt %s: a preemption is acknowledged with its epoch, not in a heartbeat",
                    row.id, row.attempt)
        return
    # An exit that crossed the preemption order on its way is the preemption itself.
    state = end_while_preempting(report.state) if row.state is TaskState.PREEMPTING else report.state
    if not TASK_TRANSITIONS.allows(row.state, state, Fact.WORKER):
        log.info("task %s attempt %s: report %s is stale, the task is %s", row.id, row.attempt, report.state,
                 row.state)
        return
    if state in TASK_TERMINAL:
        job = rows[report.task_id]
        if starts_drain(gang=job.gang, job_state=job.job_state, was=row.state, ended=state):
            triggers[row.job_id].append(row.id)
        end_attempt(changes, row, state, job=job, handler=Fact.WORKER, exit_code=report.exit_code,
                    reason=report.reason, oom_killed=report.oom_killed, finished_at=report.at)
        return
    port = {"port": report.port} if report.port is not None else {}
    changes.task(row, state, handler=Fact.WORKER, message=report.reason, **port)
    started = {"started_at": report.at} if state is TaskState.RUNNING else {}
    world = {"world": report.world.model_dump(mode="json")} if report.world is not None else {}
    changes.attempt(row.id, row.attempt, state=state, **started, **world)


def _refusal(report: TaskReport, row: TaskRow | None, rows: dict) -> Refusal | None:
    """Why a report asks for what no worker may do; None when a worker may (or it is stale, or not its task)."""
    if report.state not in REPORTABLE:
        return Refusal(report.task_id, report.attempt, report.state,
                       f"a worker cannot report {report.state}: only the controller sets it")
    if report.state is TaskState.RUNNING and row is not None and row.state is TaskState.PREPARED \
            and rows[report.task_id].gang:
        return Refusal(report.task_id, report.attempt, report.state,
                       "a gang member starts only when StartJobs orders its whole gang to")
    return None


async def record_refusal(connection: AsyncConnection, worker_id: str, refused: Refused, now: float) -> None:
    """Put a refused heartbeat on record, in its own transaction (the heartbeat itself changed nothing)."""
    rows = {row.id: task_row(row) for row in await tasks_with_budgets(
        connection, task_ids={r.task_id for r in refused.refusals})}
    changes = ChangeSet(now)
    for refusal in refused.refusals:
        row = rows.get(refusal.task_id)
        if row is not None:
            changes.record(row.job_id, Fact.WORKER, "REFUSED", row.state, None,
                           f"worker {worker_id} reported {refusal.state} for attempt {refusal.attempt}: "
                           f"{refusal.why}", task=row)
    await changes.flush(connection)
    log.warning("worker %s: heartbeat refused: %s", worker_id, refused)


async def reap_lost_workers(connection: AsyncConnection, now: float, loss_timeout: float) -> ChangeSet:
    """Workers silent for the loss timeout are LOST; whatever they held is WORKER_FAILED, its attempt ended at the
    worker's last heartbeat (the last time it was seen running), not now."""
    changes = ChangeSet(now)
    lost = await silent_workers(connection, now - loss_timeout)
    if not lost:
        return changes
    last_seen = {w.id: w.last_heartbeat for w in lost}
    triggers: dict[int, list[int]] = defaultdict(list)
    await mark_lost(connection, list(last_seen))
    for worker in lost:
        log.warning("worker %s (%s) missed heartbeats for %.0fs: LOST", worker.id, worker.name, loss_timeout,
                    extra={"worker_id": worker.id})
        changes.worker(worker.id, Fact.REAPER, WorkerState.ALIVE, WorkerState.LOST,
                       f"no heartbeat for {loss_timeout:g}s")
    for row in await tasks_with_budgets(connection, worker_ids=list(last_seen), states=TASK_HOLDS_RESOURCES):
        task = task_row(row)
        if starts_drain(gang=row.gang, job_state=row.job_state, was=task.state, ended=TaskState.WORKER_FAILED):
            triggers[row.job_id].append(row.id)
        end_attempt(changes, task, TaskState.WORKER_FAILED, job=row, handler=Fact.REAPER,
                    reason=f"worker {row.worker_id} lost", finished_at=last_seen[row.worker_id])
    await start_drains(connection, changes, triggers)
    await settle_jobs(connection, changes, changes.touched_jobs, Fact.REAPER)
    await changes.flush(connection)
    return changes
