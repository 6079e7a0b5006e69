"""A well-formed heartbeat is answered by `HeartbeatLane`, past FastAPI's routing and dependencies, byte for byte as
the route answers it; every refusal still reaches the route and gets its 4xx as ever."""

from __future__ import annotations

import json

import pytest

from corral.controller import heartbeat_lane
from corral.core.limits import MAX_REQUEST_BODY

WORKER = {"name": "w", "address": "10.0.0.1", "capacity": {"cpu": 8, "memory": 2**34, "gpu": 0}}
CHARSET = {"content-type": "application/json; charset=utf-8"}  # valid, but taken by the route alone


@pytest.fixture
def served(monkeypatch):
    """The worker ids of the heartbeats the lane answered itself."""
    answered = []

    async def counted(services, worker_id, body):
        answered.append(worker_id)
        return await original(services, worker_id, body)

    original = heartbeat_lane.answer_heartbeat
    monkeypatch.setattr(heartbeat_lane, "answer_heartbeat", counted)
    return answered


async def _registered(worker) -> str:
    return (await worker.post("/api/v1/workers", json=WORKER)).json()["worker_id"]


async def test_a_heartbeat_is_answered_by_the_lane_as_the_route_answers_it(api, served) -> None:
    async with api.as_("join-token") as worker:
        worker_id = await _registered(worker)
        path = f"/api/v1/workers/{worker_id}/heartbeat"
        body = json.dumps({"wait": 0, "holding": [[1, 0]]}).encode()
        laned = await worker.post(path, content=body, headers={"content-type": "application/json"})
        assert served == [worker_id]
        routed = await worker.post(path, content=body, headers=CHARSET)
        assert served == [worker_id]  # the route's
        assert laned.status_code == routed.status_code == 200
        assert laned.content == routed.content == b'{"orders":[],"heartbeat_interval":2.0}'
        assert (laned.headers["content-type"], laned.headers["content-length"]) == (
            routed.headers["content-type"], routed.headers["content-length"])
        async with api.admin() as admin:  # the admin token is a worker's too
            assert (await admin.post(path, json={"wait": 0})).status_code == 200
        assert served == [worker_id, worker_id]


async def test_the_lanes_own_refusals_are_the_routes(api, served) -> None:
    """An unknown worker passes every check of the request: the lane answers its 409, as the route does."""
    async with api.as_("join-token") as worker:
        laned = await worker.post("/api/v1/workers/nosuch/heartbeat", json={"wait": 0})
        routed = await worker.post("/api/v1/workers/nosuch/heartbeat", content=b'{"wait": 0}', headers=CHARSET)
    assert served == ["nosuch"]
    assert laned.status_code == routed.status_code == 409
    assert laned.content == routed.content and "not registered" in laned.json()["detail"]


@pytest.mark.parametrize(("headers", "status", "detail"), [
    ({}, 401, "missing bearer token (Authorization: Bearer ...)"),
    ({"Authorization": "Bearer wrong"}, 401, "wrong join token"),
    ({"Authorization": "Basic join-token"}, 401, "missing bearer token (Authorization: Bearer ...)"),
])
async def test_a_heartbeat_without_the_workers_token_is_refused(api, served, headers, status, detail) -> None:
    async with api.as_("join-token") as worker:
        worker_id = await _registered(worker)
    async with api.as_("unused") as client:
        client.headers.pop("Authorization")
        refused = await client.post(f"/api/v1/workers/{worker_id}/heartbeat", json={"wait": 0}, headers=headers)
    assert (refused.status_code, refused.json()) == (status, {"detail": detail})
    assert served == []


@pytest.mark.parametrize(("body", "where"), [
    (b'{"wait": 0, "extra": 1}', ["body", "extra"]),  # extra="forbid"
    (b'{"wait": 61}', ["body", "wait"]),
    (b'{"wait": NaN}', ["body", "wait"]),
    (b'{"wait": ', ["body", 9]),
    (b"[]", ["body"]),
    (b'{"reports": [{"task_id": 1}]}', ["body", "reports", 0, "attempt"]),
    (b'{"wait": 0, "pythons": ["3.12\\u0000"]}', ["body"]),  # a string refused wherever it is
    (b'{"wait": 0, "pythons": ["3.12\xed\xa0\x80"]}', ["body"]),  # a lone surrogate's own bytes
])
async def test_an_invalid_heartbeat_is_a_422_from_the_route(api, served, body, where) -> None:
    async with api.as_("join-token") as worker:
        worker_id = await _registered(worker)
        refused = await worker.post(f"/api/v1/workers/{worker_id}/heartbeat", content=body,
                                    headers={"content-type": "application/json"})
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"][0]["loc"] == where
    assert served == []


async def test_a_worker_id_the_store_cannot_hold_is_a_422_from_the_route(api, served) -> None:
    async with api.as_("join-token") as worker:
        refused = await worker.post("/api/v1/workers/a%00b/heartbeat", json={"wait": 0})
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["path", "worker_id"]
    assert served == []


async def test_a_heartbeat_over_the_body_limit_is_a_413_before_the_lane(api, served) -> None:
    async with api.as_("join-token") as worker:
        worker_id = await _registered(worker)
        body = b'{"wait": 0, "x": "' + b"a" * MAX_REQUEST_BODY + b'"}'
        refused = await worker.post(f"/api/v1/workers/{worker_id}/heartbeat", content=body,
                                    headers={"content-type": "application/json"})
    assert refused.status_code == 413 and "over the limit" in refused.json()["detail"]
    assert served == []


async def test_a_body_in_several_messages_reaches_the_route_whole(api, served) -> None:
    """The lane reads one message; a body in more (none past BodyLimit, but the lane does not count on it) is
    handed on with what was read."""
    messages = [{"type": "http.request", "body": b'{"wa', "more_body": True},
                {"type": "http.request", "body": b'it": 0}', "more_body": False}]
    sent = []

    async def receive():
        return messages.pop(0)

    async def send(message):
        sent.append(message)

    async def app(scope, receive, send):
        body = b""
        while True:
            message = await receive()
            body += message["body"]
            if not message["more_body"]:
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    scope = {"type": "http", "method": "POST", "path": "/api/v1/workers/w-1/heartbeat", "root_path": "",
             "headers": []}
    await heartbeat_lane.HeartbeatLane(app)(scope, receive, send)
    assert sent[-1]["body"] == b'{"wait": 0}' and served == []
