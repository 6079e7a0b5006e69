"""The API's edge: what it cannot take is a 404 (an id no row can have) or a 422 whose body is valid JSON,
never a 500, and nothing of a refused request is stored."""

from __future__ import annotations

import errno
import json
import os

import pytest

from corral.core.wire import MAX_ID

JSON = {"content-type": "application/json"}


def _valid_json(response) -> object:
    return json.loads(response.content, parse_constant=lambda name: pytest.fail(f"{name} in {response.text}"))


@pytest.mark.parametrize("body", [
    '{"command": ["true"], "begin": NaN}',
    '{"command": ["true"], "resources": {"custom": {"tpu": Infinity}}}',
    '{"command": ["true"], "retry_policy": {"retry_delay": -Infinity}}',
    '{"command": ["true"], "time_limit": 1e999}',
    '{"command": ["true"], "name": "\\ud800"}',
    '{"command": ["tr\\u0000ue"]}',
    '{"command": ["true"], "env": {"A": "x\\u0000"}}',
    '{"command": ["true"], "labels": {"k\\u0000": "v"}}',
    '{"command": ["true"], "after": [9223372036854775808]}',
    '{"command": ["true"], "after_any": [2147483648]}',
])
async def test_a_malformed_submission_is_a_422_with_a_json_body_and_stores_nothing(api, body):
    async with api.admin() as client:
        refused = await client.post("/api/v1/jobs", content=body, headers=JSON)
        assert refused.status_code == 422, refused.text
        assert _valid_json(refused)["detail"]
        assert (await client.get("/api/v1/jobs")).json()["items"] == []


@pytest.mark.parametrize("path", [
    f"/api/v1/jobs/{MAX_ID + 1}", "/api/v1/jobs/9223372036854775808", "/api/v1/jobs/99999999999999999999999",
    f"/api/v1/jobs/{MAX_ID + 1}/tasks", f"/api/v1/jobs/{MAX_ID + 1}/history", f"/api/v1/jobs/{2**63}/placement",
    f"/api/v1/jobs/{2**63}/attempts", f"/api/v1/jobs/1/tasks/{2**63}/logs", "/api/v1/jobs/-1",
])
async def test_an_id_no_row_can_have_is_unknown(api, path):
    async with api.admin() as client:
        assert (await client.post("/api/v1/jobs", json={"command": ["true"]})).status_code == 201
        answer = await client.get(path)
    assert answer.status_code == 404, answer.text
    _valid_json(answer)


async def test_an_id_out_of_range_in_a_job_token_path_is_unknown_too(api):
    async with api.admin() as client:
        job = (await client.post("/api/v1/jobs", json={"command": ["true"]})).json()
    async with api.job(job["id"]) as task:
        assert (await task.get(f"/api/v1/jobs/{2**63}")).status_code == 404
        assert (await task.get("/api/v1/jobs/\u00b2")).status_code == 422  # a digit, but not an ASCII one


@pytest.mark.parametrize("query", [
    {"cursor": str(2**63)}, {"cursor": str(MAX_ID + 1)}, {"launched_by": str(2**63)},
    {"name": "a\x00"}, {"project": "\x00"}, {"pool": "p\x00"},
])
async def test_a_query_out_of_range_or_with_nul_is_a_422(api, query):
    async with api.admin() as client:
        answer = await client.get("/api/v1/jobs", params=query)
    assert answer.status_code == 422, answer.text
    _valid_json(answer)


async def test_an_event_query_out_of_range_is_a_422(api):
    async with api.admin() as client:
        for query in ({"after": str(2**63)}, {"job": str(2**31)}, {"deployment": "m\x00"}):
            assert (await client.get("/api/v1/events", params={**query, "follow": "false"})).status_code == 422


async def test_a_deployment_with_nul_or_a_surrogate_is_a_422(api):
    async with api.admin() as client:
        for body in ('{"name": "m", "command": ["serve"], "env": {"X": "\\u0000"}}',
                     '{"name": "m", "command": ["serve\\udfff"]}',
                     '{"name": "m", "command": ["serve"], "target_concurrency": NaN}'):
            refused = await client.post("/api/v1/deployments", content=body, headers=JSON)
            assert refused.status_code == 422, refused.text
            _valid_json(refused)
        assert (await client.get("/api/v1/deployments/m%00")).status_code == 422


async def test_a_log_stream_other_than_stdout_or_stderr_is_a_422(api):
    async with api.as_("join-token") as worker:
        refused = await worker.post("/api/v1/workers/w-1/logs/1/0/secrets", params={"offset": 0}, content=b"x")
    assert refused.status_code == 422, refused.text
    assert not list(api.data_dir.rglob("0.secrets"))


async def test_an_idempotency_key_with_nul_is_a_422(api):
    async with api.admin() as client:
        refused = await client.post("/api/v1/jobs", json={"command": ["true"]}, headers={"Idempotency-Key": b"a\x00"})
        assert refused.status_code == 422, refused.text
        assert (await client.get("/api/v1/jobs")).json()["items"] == []


async def test_a_log_offset_past_any_log_is_a_422_and_one_the_disk_refuses_a_413(api, monkeypatch):
    upload = "/api/v1/workers/w-1/logs/1/0/stdout"
    async with api.as_("join-token") as worker:
        assert (await worker.post(upload, params={"offset": 2**62}, content=b"x")).status_code == 422

        def too_large(fd, data, offset):
            raise OSError(errno.EFBIG, "File too large")

        monkeypatch.setattr(os, "pwrite", too_large)
        refused = await worker.post(upload, params={"offset": 2**39}, content=b"x")
    assert refused.status_code == 413, refused.text
    _valid_json(refused)
