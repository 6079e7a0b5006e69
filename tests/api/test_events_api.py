"""GET /api/v1/events?job=N names the job's state in a header, so that a client waiting for its end needs no
read of the job when the stream opens; the reads a waiting client makes read the job's row once each."""

from __future__ import annotations

import re

from sqlalchemy import event

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


def reads_of_a_job(store) -> list[set[int]]:
    """The numbers bound to each statement the store's readers run from now on that reads `jobs` about a job (the
    engine's own reads, beside the requests, name no job): its id, and the limit and offset of a statement that also
    reads the history."""
    jobs_named: list[set[int]] = []

    def note(_connection, _cursor, statement, parameters, *_rest) -> None:
        if re.search(r"\bFROM jobs\b", statement) and (named := {v for v in parameters if isinstance(v, int)}):
            jobs_named.append(named)

    event.listen(store.engine.sync_engine, "before_cursor_execute", note)
    return jobs_named


async def test_a_cluster_admin_reads_a_job_and_opens_its_stream_reading_its_row_once(api) -> None:
    """An admin may do anything to any job, so neither the authorization nor the stream reads whose job it is; a job
    with no retry policy is alone in its chain, so its view reads no chain: a waiting client's two reads of its job
    each read the job's row once."""
    reads = reads_of_a_job(api.app.state.services.store)
    async with api.admin() as admin:
        job = (await admin.post("/api/v1/jobs", json={"command": ["true"]})).json()["id"]
        reads.clear()
        assert (await admin.get(f"/api/v1/jobs/{job}")).json()["retry_chain"] == [job]
        assert reads == [{job}]
        reads.clear()
        opened = await admin.get("/api/v1/events", params={"job": job, "last": 1, "follow": "false"})
        assert opened.headers[JOB_STATE_HEADER] == "PENDING"
        assert len(reads) == 1 and job in reads[0]
        assert (await admin.get(f"/api/v1/jobs/{job + 1}")).status_code == 404
        missing = await admin.get("/api/v1/events", params={"job": job + 1})
        assert missing.status_code == 404 and missing.json()["detail"] == f"no job {job + 1}"
