"""Creating a job: its row, one row per task, and the first history record, in one transaction."""

from __future__ import annotations

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.spec import JobSpec
from corral.core.states import JobState, TaskState
from corral.store.schema import history, jobs, tasks


async def insert_job(connection: AsyncConnection, spec: JobSpec, idempotency_key: str | None, now: float, *,
                     name: str | None = None, launched_by: int | None = None, created_by: str = "Submit",
                     note: str | None = None, **columns) -> int:
    """`name` overrides the spec's (a launched job's carries its launcher's as a prefix); `columns`: further
    job columns (a retry's chain columns); `created_by` and `note` head its history."""
    job_id = (await connection.execute(insert(jobs).values(
        name=name or spec.name, spec=spec.model_dump(mode="json"), state=JobState.PENDING, gang=spec.gang,
        priority=spec.priority, replicas=spec.replicas, max_task_failures=spec.max_task_failures,
        max_retries_failure=spec.max_retries_failure, max_retries_preemption=spec.max_retries_preemption,
        scheduling_timeout=spec.scheduling_timeout, grace_period=spec.grace_period, cancelled=False, tries=0,
        idempotency_key=idempotency_key, created_at=now, state_since=now, launched_by=launched_by, **columns,
    ).returning(jobs.c.id))).scalar_one()
    resources = spec.resources
    await connection.execute(insert(tasks), [
        dict(job_id=job_id, index=i, state=TaskState.PENDING, state_since=now, attempt=0, tries=0, failures=0,
             preemptions=0, gpu_ids=[], cpu=resources.cpu, memory=resources.memory, gpu=resources.gpu)
        for i in range(spec.replicas)
    ])
    await connection.execute(insert(history).values(
        at=now, job_id=job_id, handler=created_by, result="SUCCESS", to_state=JobState.PENDING, event="job.submitted",
        message=note or f"{spec.replicas} task(s){', gang' if spec.gang else ''}"
                + (f", launched by job {launched_by}" if launched_by else "")))
    return job_id
