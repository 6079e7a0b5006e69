"""Log retention against a real store: logs of jobs ended long ago go; recent and running jobs' logs stay."""

from __future__ import annotations

import os
import time

from sqlalchemy import select, update

from corral.controller.log_retention import prune_logs
from corral.store.schema import jobs, tasks

DAY = 86400.0


async def _task_of(store, job_id: int) -> int:
    async with store.read() as connection:
        return (await connection.execute(select(tasks.c.id).where(tasks.c.job_id == job_id))).scalar_one()


async def test_logs_of_jobs_ended_before_the_retention_are_removed(api) -> None:
    state = api.app.state.services
    async with api.admin() as admin:
        old, recent, running = [(await admin.post("/api/v1/jobs", json={"command": ["true"]})).json()["id"]
                                for _ in range(3)]
    now = time.time()
    async with state.store.write() as connection:
        for job_id, ended in ((old, now - 8 * DAY), (recent, now - DAY)):
            await connection.execute(update(jobs).where(jobs.c.id == job_id)
                                     .values(state="SUCCEEDED", finished_at=ended))
    task_ids = {job_id: await _task_of(state.store, job_id) for job_id in (old, recent, running)}
    for task_id in task_ids.values():
        state.logs.write(task_id, 0, "stdout", 0, b"output\n")
    orphan = max(task_ids.values()) + 100  # logs of a task the store no longer knows, written long ago
    state.logs.write(orphan, 0, "stdout", 0, b"old\n")
    os.utime(state.logs.root / f"task-{orphan}", (now - 8 * DAY, now - 8 * DAY))

    assert await prune_logs(state.store, state.logs, now, 7 * DAY) == 2
    assert sorted(state.logs.task_directories()) == sorted([task_ids[recent], task_ids[running]])
    assert state.logs.read(task_ids[old], 0, "stdout", 0) == (b"", 0)
    assert state.logs.read(task_ids[recent], 0, "stdout", 0)[0] == b"output\n"
