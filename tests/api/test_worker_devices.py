"""Each GPU of a worker in the worker list: what corral booked on it (shares, whole-device tasks, the memory shares
reserve) and what NVML last read of its use, which heartbeats carry and the edge checks."""

from __future__ import annotations

import time

import pytest

from corral.core.spec import MAX_GPU

GB = 10**9
DEVICES = [{"index": i, "model": "NVIDIA H100", "memory": 80 * GB, "uuid": f"GPU-{i}"} for i in range(2)]
WORKER = {"name": "gpu-box", "address": "10.0.0.1", "capacity": {"cpu": 8, "memory": 2**34, "gpu": 2},
          "gpus": DEVICES}
READING = {"index": 0, "memory_used": 5 * GB, "memory_total": 80 * GB, "utilization": 40}


async def _placed(worker, worker_id: str, count: int, deadline: float = 20.0) -> list[dict]:
    """The build orders for this worker, once the engine has placed `count` tasks on it."""
    ends = time.monotonic() + deadline
    while time.monotonic() < ends:
        reply = await worker.post(f"/api/v1/workers/{worker_id}/heartbeat", json={"wait": 2})
        builds = [o for o in reply.json()["orders"] if o["action"] == "build"]
        if len(builds) >= count:
            return builds
    raise AssertionError(f"{count} tasks were not placed on {worker_id} within {deadline}s")


async def _worker_view(api) -> dict:
    async with api.admin() as admin:
        [view] = (await admin.get("/api/v1/workers")).json()
    return view


async def test_each_device_shows_the_shares_and_tasks_booked_on_it(api):
    async with api.admin() as admin:
        for resources in ({"gpu": 0.5, "gpu_memory": 20 * GB}, {"gpu": 0.25}, {"gpu": 1}):
            submitted = await admin.post("/api/v1/jobs", json={"command": ["true"], "resources": resources})
            assert submitted.status_code == 201, submitted.text
    async with api.as_("join-token") as worker:
        worker_id = (await worker.post("/api/v1/workers", json=WORKER)).json()["worker_id"]
        builds = await _placed(worker, worker_id, 3)
    view = await _worker_view(api)
    assert view["used"]["gpu"] == 1.75 and view["capacity"]["gpu"] == 2
    shared, whole = sorted(view["devices"], key=lambda d: d["booked"])
    assert (shared["booked"], shared["memory_reserved"], shared["model"], shared["memory"]) == (
        0.75, 20 * GB, "NVIDIA H100", 80 * GB)
    assert sorted(t["share"] for t in shared["tasks"]) == [0.25, 0.5]
    assert (whole["booked"], whole["memory_reserved"], [t["share"] for t in whole["tasks"]]) == (1.0, 0, [1.0])
    on_device = {o["task_id"]: o["gpu_ids"] for o in builds}
    assert all(on_device[t["task_id"]] == [d["index"]] for d in view["devices"] for t in d["tasks"])
    assert shared["memory_used"] is None  # no heartbeat has carried a reading


async def test_a_heartbeat_keeps_each_devices_latest_reading(api):
    async with api.as_("join-token") as worker:
        worker_id = (await worker.post("/api/v1/workers", json=WORKER)).json()["worker_id"]
        for used in (5 * GB, 7 * GB):
            readings = [READING | {"memory_used": used}, READING | {"index": 9, "utilization": None}]
            sent = await worker.post(f"/api/v1/workers/{worker_id}/heartbeat", json={"gpus": readings})
            assert sent.status_code == 200, sent.text
    first, second = (await _worker_view(api))["devices"]
    assert (first["memory_used"], first["utilization"], first["memory"]) == (7 * GB, 40, 80 * GB)
    assert second["memory_used"] is None  # device 9 is none of this worker's: its reading is dropped


@pytest.mark.parametrize(("gpus", "says"), [
    ([READING | {"memory_used": 81 * GB}], "used of"),
    ([READING | {"index": -1}], "greater than or equal to 0"),
    ([READING | {"index": MAX_GPU}], "less than 256"),
    ([READING | {"utilization": 101}], "less than or equal to 100"),
    ([READING, READING], "an index appears twice"),
    ([READING | {"index": i} for i in range(MAX_GPU + 1)], "at most 256"),
    ([READING | {"temperature": 90}], "Extra inputs"),
    ([READING | {"memory_used": "lots"}], "valid integer"),
    ([{"index": 0}], "Field required"),
    ("all fine", "valid list"),
])
async def test_a_nonsense_reading_is_refused_and_nothing_of_the_heartbeat_applied(api, gpus, says):
    async with api.as_("join-token") as worker:
        worker_id = (await worker.post("/api/v1/workers", json=WORKER)).json()["worker_id"]
        refused = await worker.post(f"/api/v1/workers/{worker_id}/heartbeat", json={"gpus": gpus})
    assert refused.status_code == 422, refused.text
    assert says in refused.text
    assert all(device["memory_used"] is None for device in (await _worker_view(api))["devices"])


async def test_shares_add_up_in_hundredths_on_the_worker_and_its_device(api):
    async with api.admin() as admin:
        for share in (0.1, 0.2):
            submitted = await admin.post("/api/v1/jobs", json={"command": ["true"], "resources": {"gpu": share}})
            assert submitted.status_code == 201, submitted.text
    async with api.as_("join-token") as worker:
        worker_id = (await worker.post("/api/v1/workers", json=WORKER)).json()["worker_id"]
        await _placed(worker, worker_id, 2)
    view = await _worker_view(api)
    assert view["used"]["gpu"] == 0.3  # not 0.30000000000000004
    assert [device["booked"] for device in view["devices"]] == [0.3, 0.0]
    async with api.admin() as admin:
        overview = (await admin.get("/api/v1/overview")).json()
    assert [w["used"]["gpu"] for w in overview["summary"]["per_worker"]] == [0.3]
