"""A log read names what is missing: the job, the task (and which tasks exist) or the attempt (and which exist)."""

from __future__ import annotations

from sqlalchemy import insert, select

from corral.store.schema import attempts, tasks


async def test_a_log_read_of_a_missing_job_task_or_attempt_is_a_404_that_says_which(api):
    async with api.admin() as admin:
        job = (await admin.post("/api/v1/jobs", json={"command": ["true"], "replicas": 2})).json()["id"]

        async def detail(path: str, **params) -> tuple[int, str]:
            response = await admin.get(path, params=params)
            return response.status_code, response.json()["detail"]

        assert await detail("/api/v1/jobs/99999/tasks/0/logs") == (404, "no job 99999")
        assert await detail(f"/api/v1/jobs/{job}/tasks/2/logs") == (
            404, f"job {job} has no task 2 (its tasks are 0 to 1)")
        assert await detail(f"/api/v1/jobs/{job}/tasks/0/logs", attempt=7) == (
            404, f"task 0 of job {job} has no attempt 7 (it has not started an attempt yet)")
        current = await admin.get(f"/api/v1/jobs/{job}/tasks/0/logs", params={"attempt": 0})
        assert (current.status_code, current.content) == (200, b"")  # the one it waits to start
        async with api.app.state.services.store.write() as connection:
            task_id = (await connection.execute(
                select(tasks.c.id).where(tasks.c.job_id == job, tasks.c.index == 0))).scalar_one()
            await connection.execute(insert(attempts), [
                {"task_id": task_id, "attempt": n, "state": "FAILED"} for n in (0, 1)])
        assert await detail(f"/api/v1/jobs/{job}/tasks/0/logs", attempt=7) == (
            404, f"task 0 of job {job} has no attempt 7 (its attempts are 0, 1)")
        found = await admin.get(f"/api/v1/jobs/{job}/tasks/0/logs", params={"attempt": 1})
        assert (found.status_code, found.content, found.headers["X-Corral-Attempt"]) == (200, b"", "1")
