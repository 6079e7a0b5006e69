"""Registration and heartbeats are bounded to what a real machine has and says: a 422, nothing stored."""

from __future__ import annotations

import fastapi.dependencies.utils
import pytest

from corral.core import limits
from corral.core.spec import MAX_GPU

BASE = {"name": "w", "address": "10.0.0.1", "capacity": {"cpu": 8, "memory": 2**34, "gpu": 0}}


def _with(**changes) -> dict:
    body = {**BASE, "capacity": dict(BASE["capacity"])}
    for key, value in changes.items():
        if key in body["capacity"] or key == "custom":
            body["capacity"][key] = value
        else:
            body[key] = value
    return body


@pytest.mark.parametrize("body", [
    _with(gpu=2_000_000), _with(gpu=1566690764), _with(gpu=MAX_GPU + 1), _with(cpu=1e9), _with(memory=2**63),
    _with(custom={f"s{i}": 1 for i in range(65)}), _with(custom={"tpu": 1e12}),
    _with(labels={f"k{i}": "v" for i in range(65)}), _with(labels={"k": "v" * (limits.MAX_LABEL_VALUE + 1)}),
    _with(gpu_names=["x"] * (MAX_GPU + 1)), _with(address="a" * (limits.MAX_ADDRESS + 1)),
    _with(gpus=[{"index": 2**40, "model": "x"}]),
    _with(running=[{"task_id": 2**63, "attempt": 0}]),
])
async def test_a_registration_beyond_a_real_machine_is_a_422_and_registers_nothing(api, body):
    async with api.as_("join-token") as worker:
        refused = await worker.post("/api/v1/workers", json=body)
        assert refused.status_code == 422, refused.text
    async with api.admin() as admin:
        assert (await admin.get("/api/v1/workers")).json() == []


async def test_a_real_machine_registers(api):
    async with api.as_("join-token") as worker:
        answer = await worker.post("/api/v1/workers", json=_with(gpu=8, labels={"zone": "a"}, custom={"tpu": 4}))
    assert answer.status_code == 200, answer.text


async def test_a_heartbeat_with_ids_beyond_the_store_is_a_422(api):
    async with api.as_("join-token") as worker:
        worker_id = (await worker.post("/api/v1/workers", json=BASE)).json()["worker_id"]
        report = {"task_id": 2**63, "attempt": 0, "state": "RUNNING", "at": 1.0}
        answer = await worker.post(f"/api/v1/workers/{worker_id}/heartbeat", json={"reports": [report]})
    assert answer.status_code == 422, answer.text


async def test_a_heartbeat_may_bring_the_pythons_found_after_registering(api):
    async with api.as_("join-token") as worker:
        worker_id = (await worker.post("/api/v1/workers", json=_with(pythons=["3.11.7"]))).json()["worker_id"]
        heartbeat = f"/api/v1/workers/{worker_id}/heartbeat"
        assert (await worker.post(heartbeat, json={"pythons": ["3.11.7", "3.12.1"]})).status_code == 200
        assert (await worker.post(heartbeat, json={})).status_code == 200  # none found since: kept
        refused = await worker.post(heartbeat, json={"pythons": ["python3; rm -rf /"]})
        assert refused.status_code == 422, refused.text
    async with api.admin() as admin:
        assert (await admin.get("/api/v1/workers")).json()[0]["pythons"] == ["3.11.7", "3.12.1"]


async def test_a_heartbeat_s_token_is_checked_on_the_event_loop(api, monkeypatch):
    """FastAPI runs a plain function dependency in its thread pool: a hop to a thread on every heartbeat."""
    async with api.as_("join-token") as worker:
        worker_id = (await worker.post("/api/v1/workers", json=BASE)).json()["worker_id"]

        def no_thread(*_args, **_kwargs):
            raise AssertionError("a worker's call went through the thread pool")

        monkeypatch.setattr(fastapi.dependencies.utils, "run_in_threadpool", no_thread)
        answer = await worker.post(f"/api/v1/workers/{worker_id}/heartbeat", json={})
    assert answer.status_code == 200, answer.text
