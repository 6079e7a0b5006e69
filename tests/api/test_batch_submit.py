"""POST /api/v1/jobs/batch: many jobs in one call, all checked first, none stored when one is refused."""

from __future__ import annotations

import pytest

from corral.core.spec_text import MAX_BATCH

JOB = {"command": ["true"]}


async def _jobs(client) -> list[dict]:
    return (await client.get("/api/v1/jobs", params={"order": "asc"})).json()["items"]


async def test_a_batch_makes_each_job_as_a_single_submission_would_with_its_history_and_audit_row(api):
    async with api.admin() as admin:
        specs = [{**JOB, "name": f"part-{i}", "project": "vision", "replicas": 2} for i in range(3)]
        reply = await admin.post("/api/v1/jobs/batch", json={"jobs": specs})
        assert reply.status_code == 201, reply.text
        made = reply.json()
        assert [job["name"] for job in made] == ["part-0", "part-1", "part-2"]
        assert [job["id"] for job in await _jobs(admin)] == [job["id"] for job in made]
        for job in made:
            assert (job["state"], job["replicas"], job["task_counts"]) == ("PENDING", 2, {"PENDING": 2})
            history = (await admin.get(f"/api/v1/jobs/{job['id']}/history")).json()
            assert [(h["handler"], h["to_state"]) for h in history][:1] == [("Submit", "PENDING")]
        audit = (await admin.get("/api/v1/audit")).json()
    rows = sorted((r["action"], r["object"], r["job_id"], r["outcome"], r["detail"]["name"]) for r in audit)
    assert rows == [("job.submit", f"job {job['id']}", job["id"], 201, job["name"]) for job in made]


@pytest.mark.parametrize(("body", "where"), [
    ({"jobs": []}, ["body", "jobs"]),
    ({"jobs": [JOB] * (MAX_BATCH + 1)}, ["body", "jobs"]),
    ({"jobs": [JOB, {"command": []}, JOB]}, ["body", "jobs", 1, "command"]),
    ({"jobs": [JOB, JOB, {**JOB, "replicas": 0}]}, ["body", "jobs", 2, "replicas"]),
    ({"jobs": [JOB, {**JOB, "gang": True, "replicas": 2, "max_running": 1}]}, ["body", "jobs", 1]),
    ({"jobs": [JOB, {**JOB, "begin": 5}]}, ["body", "jobs", 1, "begin"]),
    ({"jobs": JOB}, ["body", "jobs"]),
    ({"jobs": ["true"]}, ["body", "jobs", 0]),
    ({"jobs": [JOB], "extra": 1}, ["body", "extra"]),
    ([JOB], ["body"]),
    ({"jobs": [JOB, JOB], "idempotency_keys": ["a"]}, ["body"]),
    ({"jobs": [JOB, JOB], "idempotency_keys": ["a", "a"]}, ["body"]),
    ({"jobs": [JOB], "idempotency_keys": [""]}, ["body", "idempotency_keys", 0]),
    ({"jobs": [JOB], "idempotency_keys": ["k" * 201]}, ["body", "idempotency_keys", 0]),
])
async def test_a_bad_batch_is_refused_naming_where_and_nothing_is_stored(api, body, where):
    async with api.admin() as admin:
        reply = await admin.post("/api/v1/jobs/batch", json=body)
        assert reply.status_code == 422, reply.text
        assert any(error["loc"][:len(where)] == where for error in reply.json()["detail"]), reply.text
        assert await _jobs(admin) == []


async def test_one_job_the_admission_refuses_refuses_the_batch_naming_its_index(api):
    async with api.admin() as admin:
        reply = await admin.post("/api/v1/jobs/batch", json={"jobs": [JOB, JOB, {**JOB, "after": [999]}]})
        assert (reply.status_code, reply.json()["detail"]) == (
            400, "jobs[2]: no job 999 to wait for (after / after_any name existing jobs)")
        bundle = await admin.post("/api/v1/jobs/batch", json={"jobs": [JOB, {**JOB, "bundle": "0" * 64}]})
        assert bundle.status_code == 400 and bundle.json()["detail"].startswith("jobs[1]: bundle ")
        assert await _jobs(admin) == []


async def test_idempotency_keys_are_honoured_per_job(api):
    async with api.admin() as admin:
        first = await admin.post("/api/v1/jobs", json={**JOB, "name": "a"}, headers={"Idempotency-Key": "ka"})
        body = {"jobs": [{**JOB, "name": "a"}, {**JOB, "name": "b"}, {**JOB, "name": "c"}],
                "idempotency_keys": ["ka", "kb", None]}
        made = await admin.post("/api/v1/jobs/batch", json=body)
        assert made.status_code == 201, made.text
        a, b, c = made.json()
        assert a["id"] == first.json()["id"] and b["idempotency_key"] == "kb" and c["idempotency_key"] is None
        again = await admin.post("/api/v1/jobs/batch",
                                 json={"jobs": body["jobs"][:2], "idempotency_keys": ["ka", "kb"]})
        assert again.status_code == 200 and [j["id"] for j in again.json()] == [a["id"], b["id"]]
        other = await admin.post("/api/v1/jobs/batch", json={"jobs": [JOB, {**JOB, "name": "not-b"}],
                                                             "idempotency_keys": ["kz", "kb"]})
        assert other.status_code == 409 and f"was used for job {b['id']} with another spec" in other.json()["detail"]
        assert len(await _jobs(admin)) == 3


async def test_a_task_token_batch_is_bounded_by_its_launcher(api):
    async with api.admin() as admin:
        driver = (await admin.post("/api/v1/jobs", json={**JOB, "name": "driver", "project": "ml"})).json()
    async with api.job(driver["id"]) as task:
        refused = await task.post("/api/v1/jobs/batch", json={"jobs": [JOB, {**JOB, "project": "other"}]})
        assert refused.status_code == 403
        made = await task.post("/api/v1/jobs/batch", json={"jobs": [{**JOB, "name": "x"}, {**JOB, "name": "y"}]})
        assert made.status_code == 201, made.text
        assert [(j["name"], j["launched_by"], j["spec"]["project"]) for j in made.json()] == [
            ("driver/x", driver["id"], "ml"), ("driver/y", driver["id"], "ml")]


async def test_max_running_goes_through_the_api(api):
    async with api.admin() as admin:
        made = await admin.post("/api/v1/jobs", json={**JOB, "replicas": 10, "max_running": 3})
        assert made.status_code == 201 and made.json()["spec"]["max_running"] == 3
        for bad in (0, -2, "x", 10_001):
            assert (await admin.post("/api/v1/jobs", json={**JOB, "max_running": bad})).status_code == 422
