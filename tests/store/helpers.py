"""Driving the engine by hand: submit, run every handler to a fixed point, report as a worker would."""

from __future__ import annotations

from sqlalchemy import select

from corral.controller.retry_defaults import retry_columns
from corral.controller.submit_settings import SubmitSettings
from corral.core.protocol import Capacity, GpuDevice, RegisterRequest, TaskReport
from corral.core.spec import JobSpec
from corral.engine.coordinator import run_handler
from corral.engine.handlers import JOB_HANDLERS
from corral.engine.preemption import acknowledge as acknowledge_preemption
from corral.engine.reports import ingest_heartbeat, reap_lost_workers, register_worker
from corral.store.jobs import insert_job
from corral.store.schema import attempts, history, jobs, tasks

NOW = 1_000_000.0


async def submit(store, now=NOW, key=None, **spec) -> int:
    spec.setdefault("command", ["true"])
    async with store.write() as connection:
        return await insert_job(connection, JobSpec(**spec), key, now)


async def add_worker(store, name="w0", cpu=4.0, memory=8 * 2**30, gpu=0, now=NOW, pool="default", labels=None,
                     custom=None, gpu_memory=()) -> str:
    """gpu_memory: bytes per device, as NVML would report them (none: devices of unknown memory)."""
    devices = [GpuDevice(index=i, model="test", memory=size) for i, size in enumerate(gpu_memory)]
    request = RegisterRequest(name=name, address="127.0.0.1", pool=pool, labels=labels or {}, gpus=devices,
                              capacity=Capacity(cpu=cpu, memory=memory, gpu=gpu, custom=custom or {}))
    async with store.write() as connection:
        return await register_worker(connection, request, now)


async def settle(store, now=NOW, rounds=20) -> None:
    """Run the handler pass until nothing changes, as the engine loop does."""
    for _ in range(rounds):
        changed = False
        for handler in JOB_HANDLERS:
            changed |= (await run_handler(store, handler, now)).changed
        if not changed:
            return
    raise AssertionError("handlers did not reach a fixed point")


async def report(store, worker_id, *events, now=NOW):
    """events: (task_id, attempt, state[, exit_code])"""
    reports = [TaskReport(task_id=e[0], attempt=e[1], state=e[2], exit_code=e[3] if len(e) > 3 else None, at=now)
               for e in events]
    async with store.write() as connection:
        return await ingest_heartbeat(connection, worker_id, reports, now)


async def reap(store, now, loss_timeout=30.0):
    async with store.write() as connection:
        return await reap_lost_workers(connection, now, loss_timeout)


async def job(store, job_id):
    async with store.read() as connection:
        return (await connection.execute(select(jobs).where(jobs.c.id == job_id))).one()


async def job_tasks(store, job_id):
    async with store.read() as connection:
        return (await connection.execute(
            select(tasks).where(tasks.c.job_id == job_id).order_by(tasks.c.index))).all()


async def task_attempts(store, task_id):
    async with store.read() as connection:
        return (await connection.execute(
            select(attempts).where(attempts.c.task_id == task_id).order_by(attempts.c.attempt))).all()


async def job_history(store, job_id):
    async with store.read() as connection:
        return (await connection.execute(
            select(history).where(history.c.job_id == job_id).order_by(history.c.id))).all()


async def run_task(store, worker_id, task, *, exit_code=0):
    """Walk one placed task through build and start to its exit, as a worker reports it."""
    await report(store, worker_id, (task.id, task.attempt, "BUILDING"), (task.id, task.attempt, "PREPARED"))
    await settle(store)
    await report(store, worker_id, (task.id, task.attempt, "RUNNING"),
                 (task.id, task.attempt, "SUCCEEDED" if exit_code == 0 else "FAILED", exit_code))
    await settle(store)


async def acknowledge(store, worker_id, task, *, epoch=None, attempt=None, exit_code=None, now=NOW):
    """The worker confirms a preempted attempt is gone, with the epoch it was told (default: the task's)."""
    async with store.read() as connection:
        current = (await connection.execute(select(tasks).where(tasks.c.id == task.id))).one()
    async with store.write() as connection:
        return await acknowledge_preemption(
            connection, worker_id, task.id, attempt=current.attempt if attempt is None else attempt,
            epoch=current.preempt_epoch if epoch is None else epoch, exit_code=exit_code, reason=None, now=now)


async def retry_columns_now(connection, spec, config_default) -> dict:
    """The retry columns a submission gives the job (the stored defaults read now)."""
    return retry_columns(spec, await SubmitSettings().retry_layers(connection, spec.project, config_default))
