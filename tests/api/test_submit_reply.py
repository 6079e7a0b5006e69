"""POST /api/v1/jobs answers with the job's view built from what it wrote, in one commit with its audit row:
the same view GET /api/v1/jobs/{id} reads back, field by field."""

from __future__ import annotations

import asyncio

import pytest

JOB = {"command": ["true"]}


@pytest.fixture
async def api(api):
    """The API with its engine stopped: no pass may change a job between its reply and its read."""
    next(task for task in asyncio.all_tasks() if task.get_name() == "engine").cancel()
    return api


async def _same_as_read_back(client, reply) -> None:
    assert reply.status_code == 201, reply.text
    made = reply.json()
    read = (await client.get(f"/api/v1/jobs/{made['id']}")).json()
    assert made.keys() == read.keys()
    for field, value in read.items():
        assert made[field] == value, field


@pytest.mark.parametrize("spec", [
    JOB,
    {**JOB, "name": "train", "project": "vision", "replicas": 3, "priority": 5, "gang": True},
    {**JOB, "retry_policy": {"max_retries": 2}},
    {**JOB, "resources": {"cpu": 2, "memory": 1024}, "scheduling_timeout": 30, "grace_period": 3},
])
async def test_the_submit_reply_is_the_view_a_read_gives(api, spec) -> None:
    async with api.admin() as admin:
        await _same_as_read_back(admin, await admin.post("/api/v1/jobs", json=spec,
                                                         headers={"Idempotency-Key": "k-1"}))


async def test_a_job_under_a_project_retry_default_or_launched_by_a_task_is_answered_as_read(api) -> None:
    async with api.admin() as admin:
        assert (await admin.put("/api/v1/admin/projects/vision/retry-policy",
                                json={"max_retries": 3})).status_code == 200
        await _same_as_read_back(admin, await admin.post("/api/v1/jobs", json={**JOB, "project": "vision"}))
        parent = (await admin.post("/api/v1/jobs", json={**JOB, "name": "parent"})).json()["id"]
        async with api.job(parent) as task:
            await _same_as_read_back(admin, await task.post("/api/v1/jobs", json={**JOB, "name": "child"}))


async def test_a_submit_commits_its_audit_row_with_its_job_and_a_replay_or_a_refusal_still_gets_its_row(
        api, monkeypatch) -> None:
    from corral.controller import audit

    written_apart = []
    add_audit = audit.add_audit

    async def counted(connection, entries):
        written_apart.extend(entry["outcome"] for entry in entries)
        await add_audit(connection, entries)

    monkeypatch.setattr(audit, "add_audit", counted)  # the middleware's own transaction, not the route's
    async with api.admin() as admin:
        made = await admin.post("/api/v1/jobs", json={**JOB, "name": "once"}, headers={"Idempotency-Key": "k"})
        assert (made.status_code, written_apart) == (201, [])
        replay = await admin.post("/api/v1/jobs", json={**JOB, "name": "once"}, headers={"Idempotency-Key": "k"})
        assert (replay.status_code, replay.json()["id"]) == (200, made.json()["id"])
        refused = await admin.post("/api/v1/jobs", json={**JOB, "after": [999]})
        assert refused.status_code == 400
        rows = (await admin.get("/api/v1/audit")).json()
    assert written_apart == [200, 400]
    assert sorted((r["outcome"], r["object"], r["detail"].get("name")) for r in rows) == [
        (200, f"job {made.json()['id']}", "once"), (201, f"job {made.json()['id']}", "once"), (400, None, "true")]


async def test_a_pool_policy_or_retry_default_changed_through_the_api_holds_for_the_next_submit(api) -> None:
    big = {**JOB, "project": "vision", "resources": {"cpu": 4}}
    async with api.admin() as admin:
        first = (await admin.post("/api/v1/jobs", json=big)).json()
        assert first["max_retries"] == 0  # the settings read (and kept) by this submit
        assert (await admin.put("/api/v1/admin/pools/default", json={"max_per_job": {"cpu": 2}})).status_code == 200
        assert (await admin.post("/api/v1/jobs", json=big)).status_code == 400
        assert (await admin.delete("/api/v1/admin/pools/default")).status_code == 204
        assert (await admin.put("/api/v1/admin/projects/vision/retry-policy",
                                json={"max_retries": 2})).status_code == 200
        assert (await admin.post("/api/v1/jobs", json=big)).json()["max_retries"] == 2
        assert (await admin.delete("/api/v1/admin/projects/vision/retry-policy")).status_code == 200
        assert (await admin.post("/api/v1/jobs", json=big)).json()["max_retries"] == 0


async def test_concurrent_submits_are_each_answered_with_their_own_job_and_audit_row(api) -> None:
    """Two calls for each of six keys, with other specs: one of each pair makes the job, the other is refused."""
    async with api.admin() as admin:
        replies = await asyncio.wait_for(asyncio.gather(*(
            admin.post("/api/v1/jobs", json={**JOB, "name": f"job-{i}"}, headers={"Idempotency-Key": f"c{i % 6}"})
            for i in range(12))), 60)
        made = [reply.json() for reply in replies if reply.status_code == 201]
        assert sorted(job["idempotency_key"] for job in made) == [f"c{i}" for i in range(6)]
        assert sorted(reply.status_code for reply in replies if reply.status_code != 201) == [409] * 6
        for job in made:
            assert (await admin.get(f"/api/v1/jobs/{job['id']}")).json()["name"] == job["name"]
        rows = (await admin.get("/api/v1/audit")).json()
    assert sorted(r["job_id"] for r in rows if r["outcome"] == 201) == sorted(job["id"] for job in made)
