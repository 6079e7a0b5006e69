"""A share of one GPU through the API: the job is refused unless it is whole devices or a share in hundredths, and
the worker's build order carries the share (and the device memory it reserves) beside its one device."""

from __future__ import annotations

import pytest

from tests.api.test_worker_reports import _placed

GB = 10**9
WORKER = {"name": "w", "address": "10.0.0.1", "capacity": {"cpu": 8, "memory": 2**34, "gpu": 2},
          "gpus": [{"index": i, "model": "virtual", "memory": 24 * GB} for i in range(2)]}


@pytest.mark.parametrize(("gpu", "says"), [(0.333, "in hundredths"), (1.5, "from 0.01 to 0.99"), (-1, "greater than"),
                                           ("half", "not a number of GPUs")])
async def test_a_job_asking_for_neither_whole_gpus_nor_a_share_is_refused_naming_the_rule(api, gpu, says):
    async with api.admin() as admin:
        answer = await admin.post("/api/v1/jobs", json={"command": ["true"], "resources": {"gpu": gpu}})
    assert answer.status_code == 422 and says in answer.text


async def test_the_build_order_carries_a_share_and_its_memory_and_whole_devices_carry_none(api):
    async with api.admin() as admin:
        shared = (await admin.post("/api/v1/jobs", json={
            "command": ["true"], "resources": {"gpu": 0.25, "gpu_memory": "10G"}})).json()["id"]
        whole = (await admin.post("/api/v1/jobs", json={"command": ["true"], "resources": {"gpu": 1}})).json()["id"]
    async with api.as_("join-token") as worker:
        worker_id = (await worker.post("/api/v1/workers", json=WORKER)).json()["worker_id"]
        share_order, whole_order = await _placed(worker, worker_id, shared), await _placed(worker, worker_id, whole)
    assert (share_order["gpu_share"], share_order["gpu_memory"], len(share_order["gpu_ids"])) == (0.25, 10 * GB, 1)
    assert (whole_order["gpu_share"], whole_order["gpu_memory"], len(whole_order["gpu_ids"])) == (None, None, 1)
    assert share_order["gpu_ids"] != whole_order["gpu_ids"]


async def test_the_placement_analysis_judges_a_share_as_a_gpu_request_not_as_none(api):
    cpu_only = {**WORKER, "capacity": {**WORKER["capacity"], "gpu": 0}, "gpus": []}
    async with api.as_("join-token") as worker:
        await worker.post("/api/v1/workers", json=cpu_only)
    async with api.admin() as admin:
        job = (await admin.post("/api/v1/jobs", json={"command": ["true"], "resources": {"gpu": 0.5}})).json()["id"]
        (verdict,) = (await admin.get(f"/api/v1/jobs/{job}/placement")).json()["workers"]
    assert not verdict["fits"] and "gpu" in verdict["why"], verdict
