"""Worker reports and worker loss: the two ways the world outside changes task states."""

from __future__ import annotations

import logging
import secrets
from collections import defaultdict

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.drain import end_while_preempting, starts_drain
from corral.core.protocol import CachedEnvironment, RegisterRequest, TaskReport
from corral.core.states import TASK_HOLDS_RESOURCES, TASK_TERMINAL, TaskState, WorkerState, is_legal
from corral.engine.attempts import end_attempt
from corral.engine.drain import start_drains
from corral.engine.settle import settle_jobs, task_columns
from corral.store.changes import ChangeSet
from corral.store.reads import task_row
from corral.store.schema import jobs, tasks, workers

log = logging.getLogger("corral.reports")

JOB_BUDGET_COLUMNS = (jobs.c.gang, jobs.c.state.label("job_state"), jobs.c.cancelled,
                      jobs.c.max_retries_failure, jobs.c.max_retries_preemption)


class UnknownWorker(LookupError):
    """The worker is not registered, or was declared lost: it must re-register."""


async def register_worker(connection: AsyncConnection, request: RegisterRequest, now: float) -> str:
    """A new worker id each time; a LOST row under the same name is the same machine come back, and goes."""
    replaced = list((await connection.execute(
        delete(workers).where(workers.c.name == request.name, workers.c.state == WorkerState.LOST)
        .returning(workers.c.id))).scalars())
    worker_id = f"{request.name[:57]}-{secrets.token_hex(3)}"  # fits the id column (64) whatever the name
    await connection.execute(workers.insert().values(
        id=worker_id, name=request.name, address=request.address, state=WorkerState.ALIVE,
        cpu=request.capacity.cpu, memory=request.capacity.memory, gpu=request.capacity.gpu,
        gpu_names=request.gpu_names, labels=request.labels, last_heartbeat=now, registered_at=now,
        pool=request.pool, custom=request.capacity.custom,
        gpu_devices=[gpu.model_dump() for gpu in request.gpus], pythons=request.pythons,
        environments=[environment.model_dump() for environment in request.environments],
        filesystem=request.filesystem, shared_fs=request.shared_fs,
    ))
    registered = ChangeSet(now)
    capacity = request.capacity
    registered.worker(worker_id, "Register", None, WorkerState.ALIVE,
                      f"{request.name} at {request.address}: {capacity.cpu:g} CPU, {capacity.memory} B memory, "
                      f"{capacity.gpu} GPU" + (f"; replaces lost {', '.join(sorted(replaced))}" if replaced else ""))
    await registered.flush(connection)
    return worker_id


async def prune_lost_workers(connection: AsyncConnection, before: float) -> int:
    """Forget LOST workers not heard from since `before` (their history stays): the list does not grow forever."""
    pruned = await connection.execute(
        delete(workers).where(workers.c.state == WorkerState.LOST, workers.c.last_heartbeat < before))
    if pruned.rowcount:
        log.info("forgot %d worker(s) lost before %.0f", pruned.rowcount, before)
    return pruned.rowcount


async def ingest_heartbeat(
    connection: AsyncConnection, worker_id: str, reports: list[TaskReport], now: float,
    environments: list[CachedEnvironment] | None = None, pythons: list[str] | None = None,
) -> ChangeSet:
    """Mark the worker seen (with its cached environments and its Pythons, when they changed) and apply its reports
    in order; stale or repeated ones change nothing."""
    cached = {} if environments is None else {"environments": [e.model_dump() for e in environments]}
    if pythons is not None:
        cached["pythons"] = pythons
    seen = await connection.execute(
        update(workers).where(workers.c.id == worker_id, workers.c.state == WorkerState.ALIVE)
        .values(last_heartbeat=now, **cached)
    )
    if seen.rowcount == 0:
        raise UnknownWorker(worker_id)
    changes = ChangeSet(now)
    if not reports:
        return changes
    rows = {
        row.id: row
        for row in (await connection.execute(
            select(*task_columns(), *JOB_BUDGET_COLUMNS)
            .select_from(tasks.join(jobs, tasks.c.job_id == jobs.c.id))
            .where(tasks.c.id.in_({r.task_id for r in reports}))
        )).all()
    }
    current = {task_id: task_row(row) for task_id, row in rows.items()}
    triggers: dict[int, list[int]] = defaultdict(list)
    for report in reports:
        row = current.get(report.task_id)
        if row is None or row.worker_id != worker_id or row.attempt != report.attempt or row.state is report.state:
            continue
        if report.state is TaskState.PREEMPTED:
            log.warning("task %s attempt %s: a preemption is acknowledged with its epoch, not in a heartbeat",
                        row.id, row.attempt)
            continue
        # An exit that crossed the preemption order on its way is the preemption itself.
        state = end_while_preempting(report.state) if row.state is TaskState.PREEMPTING else report.state
        if not is_legal(row.state, state):
            log.warning("task %s attempt %s: ignoring report %s while %s", row.id, row.attempt, report.state,
                        row.state)
            continue
        if state in TASK_TERMINAL:
            job = rows[report.task_id]
            if starts_drain(gang=job.gang, job_state=job.job_state, was=row.state, ended=state):
                triggers[row.job_id].append(row.id)
            end_attempt(changes, row, state, job=job, handler="Worker", exit_code=report.exit_code,
                        reason=report.reason, oom_killed=report.oom_killed, finished_at=report.at)
            continue
        port = {"port": report.port} if report.port is not None else {}
        changes.task(row, report.state, handler="Worker", message=report.reason, **port)
        started = {"started_at": report.at} if report.state is TaskState.RUNNING else {}
        world = {"world": report.world.model_dump(mode="json")} if report.world is not None else {}
        changes.attempt(row.id, row.attempt, state=report.state, **started, **world)
    await changes.flush(connection)
    drained = await start_drains(connection, triggers, now)
    settled = await settle_jobs(connection, changes.touched_jobs, now, "Worker")
    changes.touched_workers |= drained.touched_workers | settled.touched_workers
    return changes


async def reap_lost_workers(connection: AsyncConnection, now: float, loss_timeout: float) -> ChangeSet:
    """Workers silent for the loss timeout are LOST; whatever they held is WORKER_FAILED, its attempt ended at the
    worker's last heartbeat (the last time it was seen running), not now."""
    changes = ChangeSet(now)
    lost = (await connection.execute(
        select(workers.c.id, workers.c.name, workers.c.last_heartbeat).where(
            workers.c.state == WorkerState.ALIVE, workers.c.last_heartbeat < now - loss_timeout)
    )).all()
    if not lost:
        return changes
    lost_ids = [w.id for w in lost]
    last_seen = {w.id: w.last_heartbeat for w in lost}
    triggers: dict[int, list[int]] = defaultdict(list)
    await connection.execute(update(workers).where(workers.c.id.in_(lost_ids)).values(state=WorkerState.LOST))
    for worker in lost:
        log.warning("worker %s (%s) missed heartbeats for %.0fs: LOST", worker.id, worker.name, loss_timeout,
                    extra={"worker_id": worker.id})
        changes.worker(worker.id, "Reaper", WorkerState.ALIVE, WorkerState.LOST,
                       f"no heartbeat for {loss_timeout:g}s")
    for row in (await connection.execute(
        select(*task_columns(), *JOB_BUDGET_COLUMNS)
        .select_from(tasks.join(jobs, tasks.c.job_id == jobs.c.id))
        .where(tasks.c.worker_id.in_(lost_ids), tasks.c.state.in_([str(s) for s in TASK_HOLDS_RESOURCES]))
    )).all():
        task = task_row(row)
        if starts_drain(gang=row.gang, job_state=row.job_state, was=task.state, ended=TaskState.WORKER_FAILED):
            triggers[row.job_id].append(row.id)
        end_attempt(changes, task, TaskState.WORKER_FAILED, job=row, handler="Reaper",
                    reason=f"worker {row.worker_id} lost", finished_at=last_seen[row.worker_id])
    await changes.flush(connection)
    drained = await start_drains(connection, triggers, now)
    await settle_jobs(connection, changes.touched_jobs, now, "Reaper")
    changes.touched_workers |= drained.touched_workers
    return changes
