"""GET /api/v1/events?job=N names the job's state in a header, so that a client waiting for its end needs no
read of the job when the stream opens."""

from __future__ import annotations

from corral.core.states import JOB_STATE_HEADER


async def test_a_jobs_stream_names_its_state_and_a_wider_stream_names_none(api) -> None:
    async with api.admin() as admin:
        job = (await admin.post("/api/v1/jobs", json={"command": ["true"]})).json()["id"]
        opened = await admin.get("/api/v1/events", params={"job": job, "last": 1, "follow": "false"})
        assert opened.status_code == 200 and opened.headers[JOB_STATE_HEADER] == "PENDING"
        assert (await admin.post(f"/api/v1/jobs/{job}/cancel")).status_code == 200
        opened = await admin.get("/api/v1/events", params={"job": job, "last": 1, "follow": "false"})
        assert opened.headers[JOB_STATE_HEADER] == "CANCELLED"
        assert JOB_STATE_HEADER not in (await admin.get("/api/v1/events", params={"follow": "false"})).headers
