"""A submission of the plain form is answered by `SubmitLane`, past FastAPI's routing and dependencies, byte for
byte as the route answers it (its refusals too, and the audit rows); every other form, a body that fails validation
and a refused token reach the route and get its answer as ever."""

from __future__ import annotations

import json
import re

import pytest

from corral.controller import submit_lane
from tests.api.test_usage_api import personal_token

JOB = {"command": ["true"], "resources": {"cpu": 1}}
ROUTED = "/api/v1/jobs?shared_workdir=false"  # the route's default, but a query: the route's alone
MOVING = re.compile(rb'"(created_at|state_since|id)":[0-9.e+]+|"retry_chain":\[[0-9]+\]|job [0-9]+')


@pytest.fixture
def served(monkeypatch) -> list[str]:
    """The names of the jobs whose submission the lane answered itself."""
    answered = []

    async def counted(spec, request, **kwargs):
        answered.append(spec.name)
        return await original(spec, request, **kwargs)

    original = submit_lane.submit
    monkeypatch.setattr(submit_lane, "submit", counted)
    return answered


def _same(laned, routed) -> None:
    """The same status, headers and bytes, but for the job's id and times."""
    assert laned.status_code == routed.status_code
    assert MOVING.sub(b"_", laned.content) == MOVING.sub(b"_", routed.content)
    assert [(k, v) for k, v in laned.headers.items() if k != "content-length"] == [
        (k, v) for k, v in routed.headers.items() if k != "content-length"]
    assert len(laned.content) - len(routed.content) == int(laned.headers["content-length"]) - int(
        routed.headers["content-length"])


async def test_a_submission_is_answered_by_the_lane_as_the_route_answers_it(api, served) -> None:
    async with api.admin() as admin:
        for spec in (JOB, {**JOB, "name": "many", "replicas": 3, "priority": 4, "env": {"A": "1"}},
                     {**JOB, "name": "gang", "replicas": 2, "gang": True, "project": "vision"},
                     {**JOB, "name": "retried", "retry_policy": {"max_retries": 2}}):
            laned, routed = await admin.post("/api/v1/jobs", json=spec), await admin.post(ROUTED, json=spec)
            assert laned.status_code == 201
            _same(laned, routed)
        assert served == ["true", "many", "gang", "retried"]
        rows = (await admin.get("/api/v1/audit")).json()
    submits = [(r["action"], r["outcome"], r["detail"]) for r in rows if r["action"] == "job.submit"]
    assert len(submits) == 8 and submits[0::2] == submits[1::2]  # each call's row, the same through either


async def test_the_lanes_refusals_are_the_routes(api, served) -> None:
    """Calls whose form and token pass, refused by the submission's own checks: the same answers either way."""
    async with api.admin() as admin:
        assert (await admin.put("/api/v1/admin/pools/default", json={"max_per_job": {"cpu": 2}})).status_code == 200
        for spec in ({**JOB, "name": "big", "resources": {"cpu": 4}}, {**JOB, "name": "after", "after": [999999]},
                     {**JOB, "name": "late", "begin": "2090-01-01T00:00:00Z"},
                     {**JOB, "name": "unbundled", "bundle": "b" * 64}):
            laned, routed = await admin.post("/api/v1/jobs", json=spec), await admin.post(ROUTED, json=spec)
            assert laned.status_code in (400, 422), laned.text
            _same(laned, routed)
        assert served == ["big", "after", "late", "unbundled"]


async def test_a_persons_and_a_jobs_token_are_named_by_the_lane(api, served) -> None:
    async with api.admin() as admin:
        alice = await personal_token(admin, "alice", "member")
        viewer = await personal_token(admin, "vic", "viewer")
        for headers, spec in ((alice, {**JOB, "name": "hers", "project": "vision"}),
                              (viewer, {**JOB, "name": "refused", "project": "vision"})):
            laned = await admin.post("/api/v1/jobs", json=spec, headers=headers)
            routed = await admin.post(ROUTED, json=spec, headers=headers)
            _same(laned, routed)
        parent = (await admin.post("/api/v1/jobs", json={**JOB, "name": "parent"})).json()["id"]
    async with api.job(parent) as job:
        laned, routed = await job.post("/api/v1/jobs", json={**JOB, "name": "child"}), await job.post(ROUTED, json={
            **JOB, "name": "child"})
    _same(laned, routed)
    assert served == ["hers", "refused", "parent", "child"]


@pytest.mark.parametrize(("headers", "body", "status"), [
    ({}, b'{"command": ["true"], "replicas": 0}', 422),  # a spec that fails validation
    ({}, b'{"command": ', 422),  # no JSON
    ({}, b'', 422),  # no body
    ({"content-type": "application/json; charset=utf-8"}, json.dumps(JOB).encode(), 201),  # valid, the route's
    ({"content-type": "text/plain"}, json.dumps(JOB).encode(), 422),
    ({"idempotency-key": "k"}, json.dumps(JOB).encode(), 201),
    ({"idempotency-key": "k" * 201}, json.dumps(JOB).encode(), 422),
    ({"authorization": "Bearer wrong"}, json.dumps(JOB).encode(), 401),
    ({"authorization": "Basic admin-token"}, json.dumps(JOB).encode(), 401),
])
async def test_every_other_call_reaches_the_route(api, served, headers, body, status) -> None:
    async with api.admin() as admin:
        reply = await admin.post("/api/v1/jobs", content=body, headers={"content-type": "application/json", **headers})
    assert reply.status_code == status, reply.text
    assert served == []


@pytest.mark.parametrize("body", [
    b'{"command": ["true"], "command": ["false"], "labels": {"a": "b", "a": "c"}}',  # duplicate keys: the last
    b'{"command": ["true"], "replicas": "3", "gang": "1", "priority": " High "}',  # strings the fields read
    b'{"command": ["true"], "replicas": 2.0, "max_task_failures": 1e0, "grace_period": 1E2, "time_limit": "2h"}',
    '{"command": ["true"], "name": "Jöb", "env": {"A": "ünï \U0001f600"}, "resources": {"memory": "1GiB"}}'.encode(),
    b'{"command": ["true"], "after_any": [], "begin": "1.7e9", "retry_policy": {"max_retries": 2}}',
])
async def test_a_body_validated_from_its_bytes_is_answered_as_the_route_answers_it(api, served, monkeypatch,
                                                                                 body) -> None:
    """A body with no string to walk is validated by pydantic from its bytes, without `json.loads`: the same spec,
    so the same answer and row, as the route's (which parses the JSON, then validates the objects)."""
    def refused(*args, **kwargs):
        raise AssertionError("the lane parsed the body with json.loads")

    monkeypatch.setattr(submit_lane.json, "loads", refused)  # the lane's module's json is the json module
    async with api.admin() as admin:
        laned = await admin.post("/api/v1/jobs", content=body, headers={"content-type": "application/json"})
        monkeypatch.undo()
        routed = await admin.post(ROUTED, content=body, headers={"content-type": "application/json"})
    assert laned.status_code == 201, laned.text
    _same(laned, routed)
    assert len(served) == 1


async def test_a_body_json_mode_refuses_reaches_the_route(api, served) -> None:
    """A UTF-8 BOM: `json.loads` (the route's parse) skips it, pydantic's JSON mode refuses it: the route answers."""
    async with api.admin() as admin:
        reply = await admin.post("/api/v1/jobs", content=b"\xef\xbb\xbf" + json.dumps(JOB).encode(),
                                 headers={"content-type": "application/json"})
    assert reply.status_code == 201, reply.text
    assert served == []
