"""A worker's reports may make only the moves the task table gives to a worker: any other is refused whole (409),
nothing of the heartbeat applied, and the refusal is on the job's record."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from corral.controller import orders, workers_api
from corral.store.changes import StaleWrite

WORKER = {"name": "w", "address": "10.0.0.1", "capacity": {"cpu": 8, "memory": 2**34, "gpu": 0}}


async def _placed(worker, worker_id: str, job_id: int, deadline: float = 20.0) -> dict:
    """The build order of the job's first task, once the engine has placed it on this worker."""
    ends = time.monotonic() + deadline
    while time.monotonic() < ends:
        reply = await worker.post(f"/api/v1/workers/{worker_id}/heartbeat", json={"wait": 2})
        builds = [o for o in reply.json()["orders"] if o["action"] == "build" and o["job_id"] == job_id]
        if builds:
            return builds[0]
    raise AssertionError(f"job {job_id} was not placed on {worker_id} within {deadline}s")


async def _setup(api, worker, **spec):
    async with api.admin() as admin:
        job_id = (await admin.post("/api/v1/jobs", json={"command": ["true"], **spec})).json()["id"]
    worker_id = (await worker.post("/api/v1/workers", json=WORKER)).json()["worker_id"]
    return job_id, worker_id, await _placed(worker, worker_id, job_id)


def _report(order: dict, state: str) -> dict:
    return {"task_id": order["task_id"], "attempt": order["attempt"], "state": state, "at": time.time()}


async def _task_state(api, job_id: int, index: int = 0) -> str:
    async with api.admin() as admin:
        return (await admin.get(f"/api/v1/jobs/{job_id}/tasks")).json()[index]["state"]


@pytest.mark.parametrize("state", ["PREEMPTING", "PENDING", "TERMINATING", "WORKER_FAILED", "STARTING"])
async def test_a_report_of_a_move_only_the_controller_makes_is_refused_whole_and_recorded(api, state):
    async with api.as_("join-token") as worker:
        job_id, worker_id, order = await _setup(api, worker)
        refused = await worker.post(f"/api/v1/workers/{worker_id}/heartbeat",
                                    json={"reports": [_report(order, "BUILDING"), _report(order, state)]})
        assert refused.status_code == 409, refused.text
        detail = refused.json()["detail"]
        assert detail["refused"] == [{"task_id": order["task_id"], "attempt": order["attempt"], "state": state}]
        assert "only the controller sets it" in detail["message"]
        assert await _task_state(api, job_id) == "ASSIGNED"  # its BUILDING, in the same heartbeat, is not applied
        async with api.admin() as admin:
            history = (await admin.get(f"/api/v1/jobs/{job_id}/history")).json()
        refusals = [h for h in history if h["result"] == "REFUSED"]
        assert len(refusals) == 1 and refusals[0]["handler"] == "Worker" and state in refusals[0]["message"]
        accepted = await worker.post(f"/api/v1/workers/{worker_id}/heartbeat",
                                     json={"reports": [_report(order, "BUILDING")]})
        assert accepted.status_code == 200, accepted.text
        assert await _task_state(api, job_id) == "BUILDING"


async def test_a_gang_member_is_built_with_no_start_in_its_order(api):
    async with api.as_("join-token") as worker:
        _, _, order = await _setup(api, worker, gang=True, replicas=1)
    assert order["start"] is False  # a gang waits for StartJobs (a self-started member is refused: tests/store)


async def test_an_independent_task_is_started_by_its_worker_as_soon_as_it_is_prepared(api):
    async with api.as_("join-token") as worker:
        job_id, worker_id, order = await _setup(api, worker)
        assert order["start"] is True
        reports = [_report(order, "BUILDING"), _report(order, "PREPARED"), _report(order, "RUNNING")]
        assert (await worker.post(f"/api/v1/workers/{worker_id}/heartbeat",
                                  json={"reports": reports})).status_code == 200
    assert await _task_state(api, job_id) == "RUNNING"


async def test_a_heartbeat_fenced_off_by_another_controllers_commit_is_applied_again(api, monkeypatch):
    """With several controllers, another's commit may move the heartbeat's rows first (StaleWrite): the reports are
    applied again over what it wrote; after FENCED_TRIES the worker is told to send the heartbeat again (503)."""
    fenced = {"left": 1}
    reports = api.app.state.services.reports
    ingest = reports.write_group

    async def fenced_off_first(*args, **kwargs):
        if fenced["left"]:
            fenced["left"] -= 1
            raise StaleWrite("tasks: rows [1] changed under us")
        return await ingest(*args, **kwargs)

    monkeypatch.setattr(reports, "write_group", fenced_off_first)
    async with api.as_("join-token") as worker:
        job_id, worker_id, order = await _setup(api, worker)
        applied = await worker.post(f"/api/v1/workers/{worker_id}/heartbeat",
                                    json={"reports": [_report(order, "BUILDING")]})
        assert applied.status_code == 200, applied.text
        assert fenced["left"] == 0 and await _task_state(api, job_id) == "BUILDING"
        fenced["left"] = workers_api.FENCED_TRIES
        refused = await worker.post(f"/api/v1/workers/{worker_id}/heartbeat",
                                    json={"reports": [_report(order, "PREPARED")]})
        assert refused.status_code == 503 and "send it again" in refused.json()["detail"], refused.text
        assert await _task_state(api, job_id) == "BUILDING"


async def test_a_long_poll_is_answered_by_its_wait_counted_from_its_arrival(api, monkeypatch):
    """The time a heartbeat's mark waits for the writer is part of its wait, not added to it: a poll whose mark is
    committed only after its whole wait is answered at once rather than a wait later (the worker's interval kept)."""
    now = {"t": 1000.0}
    monkeypatch.setattr(workers_api, "clock", lambda: now["t"])
    async with api.as_("join-token") as worker:
        worker_id = (await worker.post("/api/v1/workers", json=WORKER)).json()["worker_id"]
        marks = api.app.state.services.seen
        mark = marks.seen

        async def slow_mark(seen_id: str) -> None:
            await mark(seen_id)
            now["t"] += 60  # the writer was held for longer than the poll's wait

        monkeypatch.setattr(marks, "seen", slow_mark)
        async with asyncio.timeout(10):  # the old wait, 30 s after the mark, would run past this
            answer = await worker.post(f"/api/v1/workers/{worker_id}/heartbeat", json={"wait": 30})
        assert answer.status_code == 200 and answer.json()["orders"] == []


def counted_reads(monkeypatch) -> list[str]:
    """The workers whose orders the heartbeats read, in order."""
    reads: list[str] = []
    read = orders.orders_of

    async def counted(connection, worker_ids, *args):
        reads.extend(worker_ids)
        return await read(connection, worker_ids, *args)

    monkeypatch.setattr(orders, "orders_of", counted)
    return reads


async def test_a_poll_reads_no_orders_for_a_worker_answered_with_none_and_not_rung_since(api, monkeypatch):
    """Its orders would be none: they change only by a commit that rings the worker, or by its own reports, which
    are answered with what they make. Once rung (a placement), its next poll reads again and gets the build."""
    reads = counted_reads(monkeypatch)
    async with api.as_("join-token") as worker:
        worker_id = (await worker.post("/api/v1/workers", json=WORKER)).json()["worker_id"]
        for _ in range(3):
            reply = await worker.post(f"/api/v1/workers/{worker_id}/heartbeat", json={"wait": 0})
            assert reply.status_code == 200 and reply.json()["orders"] == []
        assert reads == [worker_id]  # the first poll's only
        async with api.admin() as admin:
            job_id = (await admin.post("/api/v1/jobs", json={"command": ["true"]})).json()["id"]
        order = await _placed(worker, worker_id, job_id)
        reads.clear()
        building = await worker.post(f"/api/v1/workers/{worker_id}/heartbeat",
                                     json={"wait": 0, "reports": [_report(order, "BUILDING")]})
        assert building.json()["orders"] == [] and reads == [worker_id]  # a report's heartbeat reads what it made


async def test_a_heartbeat_is_not_given_again_the_builds_of_the_attempts_its_worker_holds(api):
    """A worker holds the attempts whose builds it took until it ends them: the orders of a wave's tasks not yet
    reported came again in every reply (each built, sent and read again); a lost reply's come again, unheld."""
    async with api.as_("join-token") as worker:
        job_id, worker_id, order = await _setup(api, worker, replicas=2)
        builds = {}
        for _ in range(20):
            reply = await worker.post(f"/api/v1/workers/{worker_id}/heartbeat", json={"wait": 0})
            builds = {o["task_id"]: o for o in reply.json()["orders"] if o["action"] == "build"}
            if len(builds) == 2:
                break
        assert len(builds) == 2, builds
        held = [order["task_id"], order["attempt"]]
        reply = await worker.post(f"/api/v1/workers/{worker_id}/heartbeat", json={"wait": 0, "holding": [held]})
        assert reply.status_code == 200, reply.text
        assert [(o["action"], o["task_id"]) for o in reply.json()["orders"]] == [
            ("build", task_id) for task_id in builds if task_id != order["task_id"]]
        reply = await worker.post(f"/api/v1/workers/{worker_id}/heartbeat", json={"wait": 0})
        assert {o["task_id"] for o in reply.json()["orders"]} == set(builds)


async def test_a_quiet_worker_s_orders_are_still_read_every_so_often(api, monkeypatch):
    """A change of orders that rang no one (none is known) reaches its worker late, never not at all."""
    reads = counted_reads(monkeypatch)
    monkeypatch.setattr(orders, "QUIET_READ_EVERY", 0.0)
    async with api.as_("join-token") as worker:
        worker_id = (await worker.post("/api/v1/workers", json=WORKER)).json()["worker_id"]
        for _ in range(3):
            reply = await worker.post(f"/api/v1/workers/{worker_id}/heartbeat", json={"wait": 0})
            assert reply.status_code == 200 and reply.json()["orders"] == []
    assert reads == [worker_id] * 3


async def test_a_report_whose_reason_holds_a_nul_or_a_lone_surrogate_is_told_not_refused(api):
    """The body's strings are checked on the raw heartbeat, reports and all; a reason is a worker's telling of
    what went wrong (an error message quoting an argument) and is made storable instead of refusing the heartbeat."""
    async with api.as_("join-token") as worker:
        job_id, worker_id, order = await _setup(api, worker)
        failed = {**_report(order, "FAILED"), "exit_code": 127, "reason": "cannot start ['x\x00y\udc80']"}
        body = json.dumps({"reports": [_report(order, "BUILDING"), failed]})  # the surrogate as a \u escape
        answer = await worker.post(f"/api/v1/workers/{worker_id}/heartbeat", content=body,
                                   headers={"content-type": "application/json"})
        assert answer.status_code == 200, answer.text
    async with api.admin() as admin:
        history = (await admin.get(f"/api/v1/jobs/{job_id}/history")).json()
    assert any("cannot start ['x\\x00y\\udc80']" in (row["message"] or "") for row in history), history
