"""Worker reports and worker loss: the two ways the world outside changes task states."""

from __future__ import annotations

import logging
import secrets

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.controller.attempts import end_attempt
from corral.controller.settle import settle_jobs, task_columns
from corral.core.protocol import RegisterRequest, TaskReport
from corral.core.states import TASK_HOLDS_RESOURCES, TASK_TERMINAL, TaskState, WorkerState, is_legal
from corral.store.changes import ChangeSet
from corral.store.reads import task_row
from corral.store.schema import jobs, tasks, workers

log = logging.getLogger("corral.reports")

JOB_BUDGET_COLUMNS = (jobs.c.gang, jobs.c.state.label("job_state"), jobs.c.cancelled,
                      jobs.c.max_retries_failure, jobs.c.max_retries_preemption)


class UnknownWorker(LookupError):
    """The worker is not registered, or was declared lost: it must re-register."""


async def register_worker(connection: AsyncConnection, request: RegisterRequest, now: float) -> str:
    worker_id = f"{request.name}-{secrets.token_hex(3)}"
    await connection.execute(workers.insert().values(
        id=worker_id, name=request.name, address=request.address, state=WorkerState.ALIVE,
        cpu=request.capacity.cpu, memory=request.capacity.memory, gpu=request.capacity.gpu,
        gpu_names=request.gpu_names, labels=request.labels, last_heartbeat=now, registered_at=now,
    ))
    return worker_id


async def ingest_heartbeat(
    connection: AsyncConnection, worker_id: str, reports: list[TaskReport], now: float
) -> ChangeSet:
    """Mark the worker seen and apply its reports in order; stale or repeated ones change nothing."""
    seen = await connection.execute(
        update(workers).where(workers.c.id == worker_id, workers.c.state == WorkerState.ALIVE)
        .values(last_heartbeat=now)
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
    for report in reports:
        row = current.get(report.task_id)
        if row is None or row.worker_id != worker_id or row.attempt != report.attempt or row.state is report.state:
            continue
        if not is_legal(row.state, report.state):
            log.warning("task %s attempt %s: ignoring report %s while %s", row.id, row.attempt, report.state,
                        row.state)
            continue
        if report.state in TASK_TERMINAL:
            end_attempt(changes, row, report.state, job=rows[report.task_id], handler="Worker",
                        exit_code=report.exit_code, reason=report.reason)
            continue
        port = {"port": report.port} if report.port is not None else {}
        changes.task(row, report.state, handler="Worker", message=report.reason, **port)
        started = {"started_at": report.at} if report.state is TaskState.RUNNING else {}
        changes.attempt(row.id, row.attempt, state=report.state, **started)
    await changes.flush(connection)
    settled = await settle_jobs(connection, changes.touched_jobs, now, "Worker")
    changes.touched_workers |= settled.touched_workers
    return changes


async def reap_lost_workers(connection: AsyncConnection, now: float, loss_timeout: float) -> ChangeSet:
    """Workers silent for the loss timeout are LOST; whatever they held is WORKER_FAILED."""
    changes = ChangeSet(now)
    lost = (await connection.execute(
        select(workers.c.id, workers.c.name).where(
            workers.c.state == WorkerState.ALIVE, workers.c.last_heartbeat < now - loss_timeout)
    )).all()
    if not lost:
        return changes
    lost_ids = [w.id for w in lost]
    await connection.execute(update(workers).where(workers.c.id.in_(lost_ids)).values(state=WorkerState.LOST))
    for worker in lost:
        log.warning("worker %s (%s) missed heartbeats for %.0fs: LOST", worker.id, worker.name, loss_timeout)
    for row in (await connection.execute(
        select(*task_columns(), *JOB_BUDGET_COLUMNS)
        .select_from(tasks.join(jobs, tasks.c.job_id == jobs.c.id))
        .where(tasks.c.worker_id.in_(lost_ids), tasks.c.state.in_([str(s) for s in TASK_HOLDS_RESOURCES]))
    )).all():
        end_attempt(changes, task_row(row), TaskState.WORKER_FAILED, job=row, handler="Reaper",
                    reason=f"worker {row.worker_id} lost")
    await changes.flush(connection)
    await settle_jobs(connection, changes.touched_jobs, now, "Reaper")
    return changes
