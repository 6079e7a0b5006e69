"""The audit log of API calls through the real app: who cancelled, refused calls with their status, no secrets,
no workers' calls, GET /api/v1/audit's filters and bounds, retention, and a row that cannot be written."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest

from corral.controller import audit
from corral.controller.audit import ACTIONS, CHANNEL, audited, prune_audit_loop
from corral.store.audit import add_audit
from tests.waiting import wait_until

SECRET = "hunter2-do-not-log"


async def _log(api, **params) -> list[dict]:
    async with api.admin() as admin:
        reply = await admin.get("/api/v1/audit", params=params)
        assert reply.status_code == 200, reply.text
        return reply.json()


async def test_a_cancel_is_recorded_with_the_canceller_its_role_address_and_outcome(api) -> None:
    async with api.admin() as admin:
        job_id = (await admin.post("/api/v1/jobs", json={"command": ["sleep", "9"], "name": "train",
                                                         "project": "vision"})).json()["id"]
        assert (await admin.post(f"/api/v1/jobs/{job_id}/cancel")).status_code == 200
    cancel, submit = await _log(api)
    assert {k: cancel[k] for k in ("actor", "role", "action", "object", "job_id", "address", "outcome")} == {
        "actor": "admin", "role": "cluster-admin", "action": "job.cancel", "object": f"job {job_id}",
        "job_id": job_id, "address": "127.0.0.1", "outcome": 200}
    assert (submit["action"], submit["object"], submit["job_id"], submit["outcome"], submit["detail"]) == (
        "job.submit", f"job {job_id}", job_id, 201, {"name": "train", "project": "vision"})
    assert time.time() - 60 < cancel["at"] <= time.time()


async def test_refused_calls_are_recorded_with_their_status(api) -> None:
    async with api.admin() as admin:
        mine, other = [(await admin.post("/api/v1/jobs", json={"command": ["x"]})).json()["id"] for _ in range(2)]
    async with api.as_("wrong-token") as stranger:
        assert (await stranger.put("/api/v1/admin/projects/vision/quota", json={})).status_code == 401
    async with api.admin() as admin:
        assert (await admin.post("/api/v1/jobs/999/cancel")).status_code == 404
        assert (await admin.post("/api/v1/jobs/abc/cancel")).status_code == 422
        assert (await admin.post("/api/v1/jobs", json={"command": ["x"], "name": "big", "project": "p",
                                                       "resources": {"cpu": 1e9}})).status_code == 422
    async with api.job(mine) as task:  # a job's token: another job is out of its reach
        assert (await task.post(f"/api/v1/jobs/{other}/cancel")).status_code == 403
    rows = [(r["actor"], r["action"], r["object"], r["job_id"], r["outcome"]) for r in await _log(api)]
    assert rows[:5] == [
        ("admin", "job.cancel", f"job {other}", other, 403),  # the identity part names the job's owner instead
        ("admin", "job.submit", None, None, 422),
        ("admin", "job.cancel", "job abc", None, 422),
        ("admin", "job.cancel", "job 999", 999, 404),
        ("anonymous", "quota.set", "project vision", None, 401),
    ]


async def test_secrets_never_reach_a_row(api) -> None:
    async with api.admin() as admin:
        submitted = await admin.post("/api/v1/jobs", json={"command": ["train", SECRET], "name": "train",
                                                           "env": {"API_KEY": SECRET}})
        assert submitted.status_code == 201
        issued = (await admin.post("/api/v1/admin/projects/vision/tokens", json={"token": SECRET + "-x"})).json()
    rows = await _log(api)
    assert [(r["action"], r["object"]) for r in rows] == [
        ("project_token.create", f"project vision token {issued['id']}"),
        ("job.submit", f"job {submitted.json()['id']}")]
    assert SECRET not in json.dumps(rows)
    assert rows[1]["detail"] == {"name": "train", "project": "default"}


async def test_workers_calls_and_reads_are_not_recorded(api) -> None:
    async with api.as_("join-token") as worker:
        registered = await worker.post("/api/v1/workers", json={
            "name": "w", "address": "127.0.0.1", "capacity": {"cpu": 1, "memory": 2**30, "gpu": 0}})
        assert registered.status_code == 200, registered.text
        worker_id = registered.json()["worker_id"]
        assert (await worker.post(f"/api/v1/workers/{worker_id}/heartbeat", json={})).status_code == 200
    async with api.admin() as admin:
        assert (await admin.get("/api/v1/jobs")).status_code == 200
        assert (await admin.post("/api/v1/no-such-route")).status_code == 404
    assert await _log(api) == []


def _routes(routes, prefix: str = "") -> list[tuple[str, str]]:
    """(method, template) of every route, inside included routers too; a WebSocket's method is CHANNEL."""
    found = []
    for route in routes:
        if hasattr(route, "original_router"):
            found += _routes(route.original_router.routes, prefix + route.include_context.prefix)
        elif hasattr(route, "path"):
            found += [(method, prefix + route.path) for method in getattr(route, "methods", None) or {CHANNEL}]
    return found


def test_every_mutating_route_of_the_app_is_named(api) -> None:
    """A route added without a name in ACTIONS would be recorded under its endpoint's name: name it."""
    routes = _routes(api.app.routes)
    assert ("POST", "/api/v1/jobs/{job_id}/cancel") in routes
    assert (CHANNEL, "/api/v1/jobs/{job_id}/tasks/{index}/exec") in routes
    assert sorted({(m, p) for m, p in routes if audited(m, p) and (m, p) not in ACTIONS}) == []


async def test_a_row_that_cannot_be_written_is_logged_and_the_call_still_succeeds(api, monkeypatch,
                                                                                   caplog) -> None:
    async def broken(connection, records):
        raise RuntimeError("the disk is full")

    monkeypatch.setattr(audit, "add_audit", broken)
    async with api.admin() as admin:
        job_id = (await admin.post("/api/v1/jobs", json={"command": ["x"]})).json()["id"]
        with caplog.at_level(logging.ERROR, logger="corral.controller.audit"):
            assert (await admin.post(f"/api/v1/jobs/{job_id}/cancel")).status_code == 200
    assert "could not write the audit row" in caplog.text and "the disk is full" in caplog.text


async def test_the_log_is_filtered_newest_first_and_bounded(api) -> None:
    store = api.app.state.services.store
    async with store.write() as connection:
        await add_audit(connection, [dict(at=float(at), actor=actor, action=action, job_id=None, detail={},
                                          role="member", object="job 1", address="10.0.0.1", outcome=200)
                                     for at, actor, action in ((100, "alice", "job.submit"), (200, "bob", "job.cancel"),
                                                               (300, "alice", "job.cancel"))])
    assert [r["at"] for r in await _log(api)] == [300.0, 200.0, 100.0]
    assert [r["at"] for r in await _log(api, user="alice")] == [300.0, 100.0]
    assert [r["actor"] for r in await _log(api, action="job.cancel")] == ["alice", "bob"]
    assert [r["at"] for r in await _log(api, since=150, until=300)] == [200.0]
    assert [r["at"] for r in await _log(api, limit=1)] == [300.0]


@pytest.mark.parametrize("params", [
    {"since": "yesterday"}, {"since": "nan"}, {"since": "inf"}, {"since": -1}, {"until": "1e400"},
    {"since": 300, "until": 200}, {"since": 200, "until": 200}, {"limit": 0}, {"limit": 1001}, {"limit": "x"},
    {"user": "a" * 65}, {"user": "a\x00b"}, {"action": "b" * 65},
])
async def test_a_bad_query_is_refused_with_422(api, params) -> None:
    async with api.admin() as admin:
        reply = await admin.get("/api/v1/audit", params=params)
    assert reply.status_code == 422, reply.text


async def test_the_log_is_for_the_admin_token_only_until_people_sign_in(api) -> None:
    async with api.job(1) as task:
        assert (await task.get("/api/v1/audit")).status_code == 401
    async with api.as_("wrong") as stranger:
        assert (await stranger.get("/api/v1/audit")).status_code == 401


async def test_retention_prunes_rows_older_than_it(api) -> None:
    store = api.app.state.services.store
    now = time.time()
    async with store.write() as connection:
        await add_audit(connection, [dict(at=at, actor="admin", action="job.cancel", job_id=None, detail={},
                                          role=None, object=None, address=None, outcome=200)
                                     for at in (now - 400 * 86400, now - 300 * 86400, now)])
    pruning = asyncio.create_task(prune_audit_loop(store, 365 * 86400.0))
    try:
        async def kept() -> list[float]:
            return [r["at"] for r in await _log(api)]

        deadline = time.monotonic() + 5
        while len(await kept()) != 2:
            assert time.monotonic() < deadline, "the old row was not pruned within 5s"
            await asyncio.sleep(0.05)
        assert await kept() == [now, now - 300 * 86400]
    finally:
        pruning.cancel()
    assert api.app.state.services.settings.audit_retention == 365 * 86400.0
    await wait_until(pruning.done, 5, "the pruner to stop")


async def test_admin_changes_name_their_object_and_a_retry_policy_is_kept_in_the_detail(api) -> None:
    async with api.admin() as admin:
        assert (await admin.put("/api/v1/admin/projects/vision/retry-policy",
                                json={"max_retries": 2})).status_code == 200
        assert (await admin.delete("/api/v1/admin/retry-policy")).status_code == 200
        assert (await admin.put("/api/v1/admin/projects/vision/quota", json={"limits": {"gpu": 4}})).status_code == 200
        assert (await admin.delete("/api/v1/admin/projects/vision/quota")).status_code == 204
    rows = [(r["action"], r["object"], r["outcome"], r["detail"]) for r in await _log(api)]
    assert rows == [("quota.remove", "project vision", 204, {}),
                    ("quota.set", "project vision", 200, {"limits": {"gpu": 4}}),
                    ("retry_policy.delete", "cluster", 200, {}),
                    ("retry_policy.set", "project vision", 200, {"policy": {"max_retries": 2}})]


async def test_an_object_template_is_parsed_once_not_for_every_row(api, monkeypatch) -> None:
    """The rows name their objects as ever, the template's fields worked out once (not a parse of it per row)."""
    import string

    parsed = []
    parse = string.Formatter.parse
    monkeypatch.setattr(string.Formatter, "parse", lambda self, text: parsed.append(text) or parse(self, text))
    async with api.admin() as admin:
        ids = [(await admin.post("/api/v1/jobs", json={"command": ["true"]})).json()["id"] for _ in range(3)]
        for job_id in ids:
            assert (await admin.post(f"/api/v1/jobs/{job_id}/cancel")).status_code == 200
    rows = await _log(api, action="job.cancel")
    assert sorted(row["object"] for row in rows) == sorted(f"job {job_id}" for job_id in ids)
    assert parsed.count("job {job_id}") <= 1
