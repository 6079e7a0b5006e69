"""The relay through a real controller (uvicorn in this process) and a fake worker speaking real WebSockets:
orders in the heartbeat reply, pairing, frames verbatim both ways, close codes both ways, the auth matrix, every
malformed request, and the attachments' records."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from starlette.datastructures import QueryParams
from websockets.exceptions import InvalidStatus

from corral.controller.relay_api import _detail
from corral.controller.relays import Refused
from corral.core.events import event_type
from corral.core.relay import (
    CLOSE_CONFLICT,
    CLOSE_FORBIDDEN,
    CLOSE_INVALID,
    CLOSE_NOT_FOUND,
    CLOSE_UNAUTHORIZED,
    CLOSE_UNAVAILABLE,
)
from corral.store.attachments import Opening, open_attachment, read_target
from corral.store.database import sqlite_url
from corral.store.store import Store
from tests.controller.relay_harness import ADMIN, FakeWorker, closed_with, job_token, live_controller, submit


@pytest.fixture
async def cluster(tmp_path):
    """A controller, a worker, an interactive job and a batch job, both RUNNING on the worker."""
    async with live_controller(tmp_path) as live:
        worker = FakeWorker(live)
        await worker.register()
        interactive = await submit(live, interactive=True)
        await worker.run(interactive)
        batch = await submit(live, command=["sleep", "100"])
        await worker.run(batch)
        try:
            yield live, worker, interactive, batch
        finally:
            await worker.close()


async def _attachments(live, job_id: int, token: str = ADMIN) -> list[dict]:
    async with live.http(token) as client:
        reply = await client.get(f"/api/v1/jobs/{job_id}/attachments")
        reply.raise_for_status()
        return reply.json()


async def _ended(live, job_id: int, deadline: float = 5.0) -> list[dict]:
    """The job's attachments once none is live: the controller records an ending just after it closes the
    other side."""
    ends = time.monotonic() + deadline
    while True:
        rows = await _attachments(live, job_id)
        if not any(a["state"] in ("opening", "open") for a in rows):
            return rows
        assert time.monotonic() < ends, f"attachments still live after {deadline}s: {rows}"
        await asyncio.sleep(0.02)


async def test_a_channel_wakes_the_workers_heartbeat_and_pipes_frames_verbatim_both_ways(cluster):
    live, worker, job_id, _ = cluster
    polling = asyncio.create_task(worker.relay_order(deadline=10))
    await asyncio.sleep(0)  # the heartbeat is on its way before the client connects; nothing waits on the clock
    async with live.open(f"/api/v1/jobs/{job_id}/tasks/0/terminal?rows=30&cols=100") as client:
        asked = time.monotonic()
        order = await asyncio.wait_for(polling, 10)
        assert time.monotonic() - asked < 1.0, "the waiting heartbeat was not woken by the channel"
        assert order["kind"] == "terminal" and (order["rows"], order["cols"], order["watch"]) == (30, 100, False)
        async with worker.dial(order["session"]) as dialed:
            await client.send(b"\x00\xffkeys")
            await client.send(json.dumps({"type": "resize", "rows": 5, "cols": 7}))
            assert await dialed.recv() == b"\x00\xffkeys"  # binary stays binary
            assert await dialed.recv() == '{"type": "resize", "rows": 5, "cols": 7}'  # text stays text
            await dialed.send(b"\x01output")
            await dialed.send('{"type":"exit","code":3}')
            assert await client.recv() == b"\x01output"
            assert await client.recv() == '{"type":"exit","code":3}'
            assert [a["state"] for a in await _attachments(live, job_id)] == ["open"]
            await dialed.close(1000, "the shell exited")
        assert await closed_with(client) == (1000, "the shell exited")
    (row,) = await _ended(live, job_id)
    assert (row["state"], row["close_code"], row["close_reason"], row["actor"]) == ("closed", 1000,
                                                                                    "the shell exited", "admin")
    assert row["address"].startswith("127.0.0.1:") and row["kind"] == "terminal" and row["connected_at"]
    async with live.http() as admin:
        history = (await admin.get(f"/api/v1/jobs/{job_id}/history")).json()
    attached, detached = [h for h in history if h["handler"] in ("Attach", "Detach")]
    assert "admin opened a terminal into task 0 from 127.0.0.1:" in attached["message"]
    assert "closed after" in detached["message"] and "1000 the shell exited" in detached["message"]
    assert event_type(job_id, 1, "Attach", "SUCCESS", None) == "task.attached"
    assert event_type(job_id, 1, "Detach", "FAILED", None) == "task.detached"


async def test_a_clients_close_reaches_the_worker_with_its_code_and_reason(cluster):
    live, worker, _, batch = cluster
    polling = asyncio.create_task(worker.relay_order())
    async with live.open(f"/api/v1/jobs/{batch}/tasks/0/exec?command=ls&command=-l&tty=1") as client:
        order = await polling
        assert (order["kind"], order["command"], order["tty"], order["detach"]) == ("exec", ["ls", "-l"], True, False)
        async with worker.dial(order["session"]) as dialed:
            await client.close(4000, "done here")
            assert await closed_with(dialed) == (4000, "done here")
    (row,) = await _ended(live, batch)
    assert (row["state"], row["close_code"]) == ("closed", 4000)


async def test_a_port_channel_names_its_port_in_the_order(cluster):
    live, worker, job_id, _ = cluster
    polling = asyncio.create_task(worker.relay_order())
    async with live.open(f"/api/v1/jobs/{job_id}/tasks/0/ports/8888") as client:
        order = await polling
        assert (order["kind"], order["port"]) == ("port", 8888)
        async with worker.dial(order["session"]) as dialed:
            await dialed.close(1000, "")
        assert (await closed_with(client))[0] == 1000


async def test_a_worker_that_never_dials_back_fails_the_channel_with_4503(tmp_path):
    async with live_controller(tmp_path, connect_timeout=0.3) as live:
        worker = FakeWorker(live)
        await worker.register()
        job_id = await submit(live, interactive=True)
        await worker.run(job_id)
        async with live.open(f"/api/v1/jobs/{job_id}/tasks/0/terminal") as client:
            assert await closed_with(client) == (CLOSE_UNAVAILABLE, f"worker {worker.id} did not answer in 0.3s")
        (row,) = await _ended(live, job_id)
        assert (row["state"], row["close_code"], row["connected_at"]) == ("failed", CLOSE_UNAVAILABLE, None)
        assert await worker.heartbeat() == []  # a channel given up on is no longer ordered
        await worker.close()


async def _refusal(live, path: str, token: str | None = ADMIN) -> tuple[int, str]:
    async with live.open(path, token) as client:
        return await closed_with(client)


async def _pairs(live, worker, path: str, token: str | None = ADMIN) -> dict:
    """Open a channel that the worker answers; the attachment recorded."""
    polling = asyncio.create_task(worker.relay_order())
    async with live.open(path, token) as client:
        async with worker.dial((await polling)["session"]) as dialed:
            await dialed.close(1000, "ok")
        assert await closed_with(client) == (1000, "ok")
    return path


@pytest.mark.parametrize(("token", "code"), [(None, CLOSE_UNAUTHORIZED), ("wrong", CLOSE_UNAUTHORIZED),
                                             ("cj_1_" + "0" * 40, CLOSE_UNAUTHORIZED)])
async def test_a_channel_without_a_valid_token_is_refused(cluster, token, code):
    live, _, job_id, _ = cluster
    assert (await _refusal(live, f"/api/v1/jobs/{job_id}/tasks/0/terminal", token))[0] == code


async def test_the_admin_and_the_jobs_own_token_attach_and_are_recorded_as_such(cluster):
    live, worker, job_id, batch = cluster
    await _pairs(live, worker, f"/api/v1/jobs/{job_id}/tasks/0/terminal")
    await _pairs(live, worker, f"/api/v1/jobs/{job_id}/tasks/0/terminal?watch=1", job_token(job_id))
    assert [a["actor"] for a in await _ended(live, job_id)] == [f"job {job_id}", "admin"]
    code, reason = await _refusal(live, f"/api/v1/jobs/{batch}/tasks/0/exec?command=sh", job_token(job_id))
    assert code == CLOSE_FORBIDDEN and f"token of job {job_id}" in reason and f"not job {batch}" in reason


async def test_a_job_token_reaches_no_job_it_launched_either(cluster):
    live, worker, job_id, _ = cluster
    async with live.http(job_token(job_id)) as parent:
        child = (await parent.post("/api/v1/jobs", json={"command": ["sh"], "interactive": True})).json()["id"]
    await worker.run(child)
    assert (await _refusal(live, f"/api/v1/jobs/{child}/tasks/0/terminal", job_token(job_id)))[0] == CLOSE_FORBIDDEN
    async with live.http(job_token(job_id)) as parent:
        assert (await parent.post(f"/api/v1/jobs/{child}/tickets")).status_code == 403


async def test_a_ticket_opens_one_channel_into_its_job_only(cluster):
    live, worker, job_id, batch = cluster
    async with live.http(job_token(job_id)) as owner:
        reply = await owner.post(f"/api/v1/jobs/{job_id}/tickets")
        assert reply.status_code == 200 and reply.json()["expires_in"] == 30
        ticket = reply.json()["ticket"]
        other = (await owner.post(f"/api/v1/jobs/{job_id}/tickets")).json()["ticket"]
    await _pairs(live, worker, f"/api/v1/jobs/{job_id}/tasks/0/terminal?ticket={ticket}", token=None)
    assert (await _attachments(live, job_id))[0]["actor"] == f"job {job_id}"  # the ticket's caller
    code, reason = await _refusal(live, f"/api/v1/jobs/{job_id}/tasks/0/terminal?ticket={ticket}", token=None)
    assert code == CLOSE_UNAUTHORIZED and "spent" in reason
    code, reason = await _refusal(live, f"/api/v1/jobs/{batch}/tasks/0/exec?command=sh&ticket={other}", token=None)
    assert code == CLOSE_FORBIDDEN and f"issued for job {job_id}" in reason
    async with live.http() as admin:
        assert (await admin.post("/api/v1/jobs/999/tickets")).status_code == 404


async def test_a_dial_back_must_be_the_workers_own_for_a_waiting_session(cluster):
    live, worker, job_id, _ = cluster
    polling = asyncio.create_task(worker.relay_order())
    async with live.open(f"/api/v1/jobs/{job_id}/tasks/0/terminal") as client:
        session = (await polling)["session"]
        async with worker.dial(session, token="wrong") as dialed:
            assert (await closed_with(dialed))[0] == CLOSE_UNAUTHORIZED
        async with worker.dial(session, worker_id="someone-else") as dialed:
            code, reason = await closed_with(dialed)
            assert code == CLOSE_FORBIDDEN and f"for worker {worker.id}" in reason
        async with worker.dial("x" * 32) as dialed:
            assert (await closed_with(dialed))[0] == CLOSE_NOT_FOUND
        async with worker.dial(session) as dialed:  # the session still waits for its own worker
            await client.send(b"hi")
            assert await dialed.recv() == b"hi"
        async with worker.dial(session) as again:  # and pairs once
            assert (await closed_with(again))[0] == CLOSE_NOT_FOUND


@pytest.mark.parametrize(("path", "code", "said"), [
    ("/api/v1/jobs/{job}/tasks/zero/terminal", CLOSE_INVALID, "task index must be a number"),
    ("/api/v1/jobs/abc/tasks/0/terminal", CLOSE_INVALID, "job id must be a number"),
    ("/api/v1/jobs/{job}/tasks/-1/terminal", CLOSE_INVALID, "task index must be a number"),
    ("/api/v1/jobs/{job}/tasks/0/ports/-1", CLOSE_INVALID, "port must be a number from 1 to 65535"),
    ("/api/v1/jobs/{job}/tasks/0/ports/0", CLOSE_INVALID, "port must be"),
    ("/api/v1/jobs/{job}/tasks/0/ports/65536", CLOSE_INVALID, "port must be"),
    ("/api/v1/jobs/{job}/tasks/0/ports/99999999999999999999", CLOSE_INVALID, "port must be"),
    ("/api/v1/jobs/{job}/tasks/0/terminal?rows=100000", CLOSE_INVALID, "rows must be a number from 1 to 1000"),
    ("/api/v1/jobs/{job}/tasks/0/terminal?cols=0", CLOSE_INVALID, "cols must be"),
    ("/api/v1/jobs/{job}/tasks/0/terminal?rows=2.5", CLOSE_INVALID, "rows must be"),
    ("/api/v1/jobs/{job}/tasks/0/terminal?watch=yes", CLOSE_INVALID, "watch must be 0 or 1"),
    ("/api/v1/jobs/{job}/tasks/0/exec", CLOSE_INVALID, "command is empty"),
    ("/api/v1/jobs/{job}/tasks/0/exec?command=", CLOSE_INVALID, "command is empty"),
    ("/api/v1/jobs/{job}/tasks/0/exec?command=%20", CLOSE_INVALID, "command is empty"),
    ("/api/v1/jobs/{job}/tasks/0/exec?command=sh&command=a%00b", CLOSE_INVALID, "NUL"),
    ("/api/v1/jobs/{job}/tasks/0/exec?command=sh&tty=2", CLOSE_INVALID, "tty must be 0 or 1"),
    ("/api/v1/jobs/{job}/tasks/0/exec?command=sh&detach=", CLOSE_INVALID, "detach must be 0 or 1"),
    ("/api/v1/jobs/{job}/tasks/7/terminal", CLOSE_NOT_FOUND, "job {job} has no task 7"),
    ("/api/v1/jobs/999/tasks/0/terminal", CLOSE_NOT_FOUND, "no job 999"),
    ("/api/v1/jobs/99999999999/tasks/0/terminal", CLOSE_NOT_FOUND, "no job 99999999999"),
    ("/api/v1/jobs/{batch}/tasks/0/terminal", CLOSE_CONFLICT,
     "job {batch} is a batch job: it has no terminal; `corral exec {batch} -- sh` runs a shell in it"),
])
async def test_a_malformed_or_impossible_channel_is_refused_saying_why(cluster, path, code, said):
    live, _, job_id, batch = cluster
    got_code, reason = await _refusal(live, path.format(job=job_id, batch=batch))
    assert got_code == code and said.format(job=job_id, batch=batch) in reason, reason
    assert await _attachments(live, job_id) == []


def test_a_command_over_the_limits_is_refused():
    """Judged here, not through a server: the WebSocket handshake takes no request line past 8 KiB, so a command
    this long cannot reach the route in a URL."""
    with pytest.raises(Refused) as refused:
        _detail("exec", QueryParams([("command", "a")] * 4097), None)
    assert refused.value.code == CLOSE_INVALID and "at most 4096" in refused.value.reason


async def test_a_task_not_running_is_refused_with_its_state(cluster):
    live, _, _, _ = cluster
    waiting = await submit(live, interactive=True, resources={"cpu": 100})  # more than any worker has
    code, reason = await _refusal(live, f"/api/v1/jobs/{waiting}/tasks/0/terminal")
    assert code == CLOSE_CONFLICT and f"task 0 of job {waiting} is PENDING, not RUNNING" in reason


async def test_attachments_are_read_with_the_jobs_own_rules(cluster):
    live, _, job_id, batch = cluster
    assert await _attachments(live, job_id, job_token(job_id)) == []
    async with live.http(job_token(batch)) as other:
        assert (await other.get(f"/api/v1/jobs/{job_id}/attachments")).status_code == 403
    async with live.http() as admin:
        assert (await admin.get("/api/v1/jobs/999/attachments")).status_code == 404
        assert (await admin.get(f"/api/v1/jobs/{job_id}/attachments?limit=0")).status_code == 422


async def test_the_http_routes_are_not_websockets(cluster):
    live, _, job_id, _ = cluster
    with pytest.raises(InvalidStatus):
        async with live.open(f"/api/v1/jobs/{job_id}/attachments"):
            pass


async def test_start_up_ends_the_channels_a_stopped_controller_held(tmp_path):
    async with live_controller(tmp_path) as live:
        worker = FakeWorker(live)
        await worker.register()
        job_id = await submit(live, interactive=True)
        await worker.run(job_id)
        await worker.close()
    store = await Store.open(sqlite_url(tmp_path / "corral.db"))
    async with store.write() as connection:  # as a controller that died with a channel waiting leaves it
        target = await read_target(connection, job_id, 0)
        await open_attachment(connection, Opening("s" * 32, target, "terminal", {}, "admin", None), time.time())
    await store.close()
    async with live_controller(tmp_path) as live:
        (row,) = await _attachments(live, job_id)
        assert (row["state"], row["close_code"], row["close_reason"]) == ("failed", CLOSE_UNAVAILABLE,
                                                                         "controller restarted")


async def test_a_client_gone_before_its_worker_answered_fails_the_channel_and_ends_its_order(cluster):
    live, worker, job_id, _ = cluster
    polling = asyncio.create_task(worker.relay_order())
    async with live.open(f"/api/v1/jobs/{job_id}/tasks/0/terminal") as client:
        session = (await polling)["session"]
        await client.close(4000, "changed my mind")
    (row,) = await _ended(live, job_id)
    assert (row["state"], row["close_code"], row["close_reason"]) == ("failed", 4000, "changed my mind")
    assert await worker.heartbeat() == []
    async with worker.dial(session) as dialed:
        assert (await closed_with(dialed))[0] == CLOSE_NOT_FOUND


async def test_a_users_token_attaches_as_its_role_allows_and_is_recorded_by_name(cluster):
    live, worker, job_id, _ = cluster  # the admin's job, in project default
    tokens = {}
    async with live.http() as admin:
        for name, role in (("mem", "member"), ("pa", "project-admin")):
            await admin.post("/api/v1/users", json={"name": name, "projects": {"default": role}})
            tokens[name] = (await admin.post("/api/v1/tokens", json={"user": name})).json()["token"]
    code, reason = await _refusal(live, f"/api/v1/jobs/{job_id}/tasks/0/terminal", tokens["mem"])
    assert (code, reason) == (CLOSE_FORBIDDEN, "a member of project default may attach only its own; this one is "
                                               "admin's")
    async with live.http(tokens["mem"]) as member:
        assert (await member.post(f"/api/v1/jobs/{job_id}/tickets")).status_code == 403
    await _pairs(live, worker, f"/api/v1/jobs/{job_id}/tasks/0/terminal?watch=1", tokens["pa"])
    assert (await _ended(live, job_id))[0]["actor"] == "pa"


async def test_an_opening_no_client_waits_for_orders_nothing(cluster, tmp_path):
    """Relay orders come from the channels this controller holds waiting for a worker: a row alone, with no client
    behind it, orders nothing (a heartbeat reads the channels only while one waits for its worker)."""
    live, worker, interactive, _ = cluster
    store = await Store.open(sqlite_url(tmp_path / "corral.db"))
    try:
        async with store.write() as connection:
            target = await read_target(connection, interactive, 0)
            await open_attachment(connection, Opening("t" * 32, target, "terminal", {}, "admin", None), time.time())
    finally:
        await store.close()
    assert [order for order in await worker.heartbeat() if order["action"] == "relay"] == []
    async with live.open(f"/api/v1/jobs/{interactive}/tasks/0/terminal"):
        assert (await worker.relay_order())["action"] == "relay"  # while a client's channel waits, it is ordered
