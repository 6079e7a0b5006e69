"""Size caps at the HTTP edge: a body over the limit is 413 before parsing, a field past its cap is 422."""

from __future__ import annotations

import hashlib

import pytest

from corral.core import limits

BIG = limits.MAX_REQUEST_BODY + 1


async def _job_count(admin) -> int:
    return len((await admin.get("/api/v1/jobs")).json()["items"])


async def test_a_body_over_the_limit_is_refused_before_parsing(api) -> None:
    async with api.admin() as admin:
        body = b'{"command": ["true"], "env": {"A": "' + b"x" * BIG + b'"}}'
        answer = await admin.post("/api/v1/jobs", content=body, headers={"content-type": "application/json"})
        assert answer.status_code == 413
        assert "over the limit" in answer.json()["detail"]
        assert await _job_count(admin) == 0


async def test_a_streamed_body_over_the_limit_is_refused(api) -> None:
    async def chunks():
        yield b'{"command": ["true"], "labels": {"a": "'
        for _ in range(BIG // 2**16 + 1):
            yield b"x" * 2**16
        yield b'"}}'

    async with api.admin() as admin:
        answer = await admin.post("/api/v1/jobs", content=chunks(), headers={"content-type": "application/json"})
        assert answer.status_code == 413
        assert await _job_count(admin) == 0


@pytest.mark.parametrize(("spec", "words"), [
    ({"command": ["true"] * (limits.MAX_ARGS + 1)}, "arguments"),
    ({"command": ["echo", "x" * (limits.MAX_ARG + 1)]}, "command argument 1"),
    ({"command": ["echo"] + ["x" * 100_000] * 11}, "command is"),
    ({"command": ["true"], "env": {"A": "x" * (limits.MAX_ENV_VALUE + 1)}}, "env A"),
    ({"command": ["true"], "env": {f"V{i}": "x" for i in range(limits.MAX_ENV_VARS + 1)}}, "variables"),
    ({"command": ["true"], "env": {f"V{i}": "x" * 100_000 for i in range(11)}}, "env is"),
    ({"command": ["true"], "labels": {f"k{i}": "v" for i in range(limits.MAX_LABELS + 1)}}, "labels"),
    ({"command": ["true"], "labels": {"k" * (limits.MAX_LABEL_KEY + 1): "v"}}, "label key"),
    ({"command": ["true"], "labels": {"k": "v" * (limits.MAX_LABEL_VALUE + 1)}}, "label k"),
    ({"command": ["true"], "constraints": ["a=b"] * (limits.MAX_CONSTRAINTS + 1)}, "constraints"),
    ({"command": ["true"], "after": list(range(1, limits.MAX_DEPENDENCIES + 2))}, "job ids"),
    ({"command": ["true"], "resources": {"custom": {f"r{i}": 1 for i in range(limits.MAX_CUSTOM_RESOURCES + 1)}}},
     "custom resources"),
])
async def test_a_job_field_past_its_cap_is_422_and_nothing_is_stored(api, spec, words) -> None:
    async with api.admin() as admin:
        answer = await admin.post("/api/v1/jobs", json=spec)
        assert answer.status_code == 422, answer.text[:200]
        assert words in str(answer.json()["detail"])
        assert await _job_count(admin) == 0


async def test_a_job_at_the_caps_is_accepted(api) -> None:
    spec = {"command": ["echo"] + ["x" * limits.MAX_ARG] * 7,
            "env": {f"V{i}": "y" * limits.MAX_ENV_VALUE for i in range(7)},
            "labels": {f"{i:0>63}": "v" * limits.MAX_LABEL_VALUE for i in range(limits.MAX_LABELS)}}
    async with api.admin() as admin:
        answer = await admin.post("/api/v1/jobs", json=spec)
        assert answer.status_code == 201, answer.text[:200]


async def test_a_deployment_past_a_cap_is_422(api) -> None:
    async with api.admin() as admin:
        for spec, words in [
            ({"name": "m", "command": ["serve"], "labels": {"k": "v" * (limits.MAX_LABEL_VALUE + 1)}}, "label k"),
            ({"name": "m", "command": ["serve"], "env": {"A": "x" * (limits.MAX_ENV_VALUE + 1)}}, "env A"),
            ({"name": "m", "command": ["serve"], "model_names": ["m"] * (limits.MAX_MODEL_NAMES + 1)}, "model names"),
        ]:
            answer = await admin.post("/api/v1/deployments", json=spec)
            assert answer.status_code == 422, answer.text[:200]
            assert words in str(answer.json()["detail"])
        assert (await admin.get("/api/v1/deployments")).json() == []


async def test_worker_registration_labels_past_the_cap_are_422(api) -> None:
    async with api.as_("join-token") as worker:
        body = {"name": "w1", "address": "127.0.0.1", "capacity": {"cpu": 1, "memory": 2**30},
                "labels": {f"k{i}": "v" for i in range(limits.MAX_LABELS + 1)}}
        answer = await worker.post("/api/v1/workers", json=body)
        assert answer.status_code == 422
        assert "labels" in str(answer.json()["detail"])
        body["labels"] = {"zone": "a"}
        answer = await worker.post("/api/v1/workers", json={**body, "address": "h" * (limits.MAX_ADDRESS + 1)})
        assert answer.status_code == 422
        assert "address" in str(answer.json()["detail"])
        assert (await worker.post("/api/v1/workers", json=body)).status_code == 200


async def test_uploads_keep_their_own_limits(api) -> None:
    data = b"z" * BIG
    digest = hashlib.sha256(data).hexdigest()
    async with api.admin() as admin:
        answer = await admin.put(f"/api/v1/bundles/{digest}", content=data)
        assert answer.status_code == 201


async def test_a_stored_spec_past_todays_caps_still_reads(api) -> None:
    """A job accepted before a cap existed stays readable, and so does every listing that holds it."""
    from sqlalchemy import update

    from corral.store.schema import deployments, jobs

    async with api.admin() as admin:
        job = (await admin.post("/api/v1/jobs", json={"command": ["true"]})).json()
        deployment = await admin.post("/api/v1/deployments", json={"name": "old", "command": ["serve"]})
        assert deployment.status_code == 201, deployment.text
        too_long = ["true"] + ["x"] * limits.MAX_ARGS
        too_many = {f"k{i}": "v" for i in range(limits.MAX_LABELS + 1)}
        async with api.app.state.services.store.write() as connection:
            await connection.execute(update(jobs).where(jobs.c.id == job["id"]).values(
                spec={**job["spec"], "command": too_long, "labels": too_many, "env": {"A": "\x00"}}))
            await connection.execute(update(deployments).where(deployments.c.name == "old").values(
                spec={**deployment.json()["spec"], "labels": too_many}))
        listing = await admin.get("/api/v1/jobs")
        assert listing.status_code == 200 and listing.json()["items"][0]["spec"]["command"] == too_long
        assert (await admin.get(f"/api/v1/jobs/{job['id']}")).status_code == 200
        assert (await admin.get("/api/v1/deployments/old")).status_code == 200


async def test_a_refusal_does_not_echo_a_large_input_back(api) -> None:
    async with api.admin() as admin:
        big = "x" * (limits.MAX_ARG + 1)
        answer = await admin.post("/api/v1/jobs", json={"command": ["echo", big]})
        assert answer.status_code == 422
        assert len(answer.content) < 2000, len(answer.content)
        assert "command argument 1" in answer.text


async def test_a_stored_job_over_a_cap_lowered_since_is_still_read(api, monkeypatch) -> None:
    """A spec is judged by its size when it comes in; a cap lowered after it was stored must not make the job, nor
    the job list holding it, unreadable (nor is a view of it judged again by a dump of its spec)."""
    async with api.admin() as admin:
        job = (await admin.post("/api/v1/jobs", json={"command": ["true"], "env": {"A": "x" * 500}})).json()
        monkeypatch.setattr(limits, "MAX_SPEC", 100)
        read = await admin.get(f"/api/v1/jobs/{job['id']}")
        assert read.status_code == 200 and read.json()["spec"] == job["spec"]
        assert [j["id"] for j in (await admin.get("/api/v1/jobs")).json()["items"]] == [job["id"]]
        refused = await admin.post("/api/v1/jobs", json={"command": ["true"], "env": {"A": "x" * 500}})
        assert refused.status_code == 422 and "bytes in all" in refused.text
