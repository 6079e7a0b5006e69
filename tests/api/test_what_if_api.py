"""GET /api/v1/jobs/{id}/what-if through the real app: its answer for a pending job, and every request it refuses."""

from __future__ import annotations

import pytest

from tests.api.conftest import Api

WORKER = {"name": "gpu-box", "address": "10.0.0.1", "capacity": {"cpu": 8, "memory": 2**34, "gpu": 4}}


async def _submit(client, **spec) -> int:
    submitted = await client.post("/api/v1/jobs", json={"command": ["true"], **spec})
    assert submitted.status_code == 201, submitted.text
    return submitted.json()["id"]


async def test_a_job_too_large_for_every_worker_is_told_how_many_gpus_start_it_now(api: Api):
    async with api.as_("join-token") as worker:
        assert (await worker.post("/api/v1/workers", json=WORKER)).status_code in (200, 201)
    async with api.admin() as admin:
        job_id = await _submit(admin, resources={"gpu": 8})
        answer = await admin.get(f"/api/v1/jobs/{job_id}/what-if")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["job_id"] == job_id and body["baseline"]["start_at"] is None and body["baseline"]["never"]
    assert body["baseline"]["text"].startswith("unknown: no worker can ever fit it")
    [gpus] = [r for r in body["remedies"] if r["kind"] == "gpus"]
    assert gpus["change"] == "--gpus 4 instead of 8" and gpus["spec"] == {"resources": {"gpu": 4}}
    assert gpus["text"] == "now" and gpus["workers"] == ["gpu-box"] and body["forecasts"] >= 2


async def test_with_no_worker_nothing_helps(api: Api):
    async with api.admin() as admin:
        job_id = await _submit(admin)
        body = (await admin.get(f"/api/v1/jobs/{job_id}/what-if")).json()
    assert body["baseline"]["never"] and body["remedies"] == []


@pytest.mark.parametrize(("path", "code"), [
    ("/api/v1/jobs/abc/what-if", 422), ("/api/v1/jobs/0/what-if", 404), (f"/api/v1/jobs/{2**63}/what-if", 404),
    ("/api/v1/jobs/999/what-if", 404),
])
async def test_a_bad_or_unknown_id_is_refused(api: Api, path, code):
    async with api.admin() as admin:
        await _submit(admin)
        answer = await admin.get(path)
    assert answer.status_code == code, answer.text
    assert answer.json()["detail"]


async def test_a_job_that_is_not_pending_is_a_409(api: Api):
    async with api.admin() as admin:
        job_id = await _submit(admin)
        assert (await admin.post(f"/api/v1/jobs/{job_id}/cancel")).status_code == 200
        answer = await admin.get(f"/api/v1/jobs/{job_id}/what-if")
    assert answer.status_code == 409
    assert answer.json()["detail"].startswith(f"job {job_id} is ") and "not pending" in answer.json()["detail"]


async def test_a_job_of_a_project_the_caller_is_not_in_is_a_403(api: Api):
    async with api.admin() as admin:
        for name, project in (("ana", "vision"), ("ben", "audio")):
            created = await admin.post("/api/v1/users", json={"name": name, "projects": {project: "member"}})
            assert created.status_code == 201, created.text
        tokens = {name: (await admin.post("/api/v1/tokens", json={"user": name})).json()["token"]
                  for name in ("ana", "ben")}
    async with api.as_(tokens["ana"]) as ana:
        job_id = await _submit(ana, project="vision")
        assert (await ana.get(f"/api/v1/jobs/{job_id}/what-if")).status_code == 200
    async with api.as_(tokens["ben"]) as ben:
        refused = await ben.get(f"/api/v1/jobs/{job_id}/what-if")
    assert refused.status_code == 403 and "not a member of project vision" in refused.json()["detail"]
