"""Channels into tasks in the audit log, through a real controller: an opened one (101) and refused ones with
their status, as the relay's close codes say them (4404 -> 404)."""

from __future__ import annotations

import asyncio

from corral.core.relay import CLOSE_NOT_FOUND, CLOSE_UNAUTHORIZED
from tests.controller.relay_harness import FakeWorker, closed_with, live_controller, submit


async def test_channels_opened_and_refused_are_recorded(tmp_path) -> None:
    async with live_controller(tmp_path) as live:
        worker = FakeWorker(live)
        try:
            await worker.register()
            job_id = await submit(live, interactive=True)
            await worker.run(job_id)
            polling = asyncio.create_task(worker.relay_order())
            async with live.open(f"/api/v1/jobs/{job_id}/tasks/0/terminal") as client:
                async with worker.dial((await polling)["session"]) as dialed:
                    await dialed.close(1000, "ok")
                assert await closed_with(client) == (1000, "ok")
            async with live.open("/api/v1/jobs/999/tasks/0/exec?command=sh") as client:
                assert (await closed_with(client))[0] == CLOSE_NOT_FOUND
            async with live.open(f"/api/v1/jobs/{job_id}/tasks/0/ports/8080", token=None) as client:
                assert (await closed_with(client))[0] == CLOSE_UNAUTHORIZED
            async with live.http() as admin:
                rows = (await admin.get("/api/v1/audit", params={"action": "job.terminal"})).json()
                rows += (await admin.get("/api/v1/audit", params={"action": "job.exec"})).json()
                rows += (await admin.get("/api/v1/audit", params={"action": "job.port"})).json()
        finally:
            await worker.close()
    assert [(r["actor"], r["object"], r["job_id"], r["address"], r["outcome"]) for r in rows] == [
        ("admin", f"job {job_id} task 0", job_id, "127.0.0.1", 101),
        ("admin", "job 999 task 0", 999, "127.0.0.1", 404),
        ("anonymous", f"job {job_id} task 0 port 8080", job_id, "127.0.0.1", 401),
    ]
