"""A worker (anyone with the join token) cannot exhaust the controller with capacities no machine has."""

from __future__ import annotations

import httpx
import psutil
import pytest

pytestmark = pytest.mark.e2e

ROGUE = {"name": "rogue", "address": "10.0.0.66", "capacity": {"cpu": 8, "memory": 2**34, "gpu": 1566690764},
         "labels": {f"k{i}": "v" for i in range(1000)}, "gpu_names": ["fake"] * 10_000}


def test_a_rogue_registration_is_refused_and_the_controller_memory_stays_flat(bare_cluster):
    cluster = bare_cluster
    controller = psutil.Process(cluster.controller.pid)
    with httpx.Client(base_url=cluster.url, headers={"Authorization": f"Bearer {cluster.join_token}"},
                      timeout=30) as worker:
        refused = worker.post("/api/v1/workers", json=ROGUE)
        assert refused.status_code == 422, refused.text
        assert "gpu" in refused.text
        for _ in range(50):  # warm up: what the first requests allocate for good is not growth
            worker.post("/api/v1/workers", json=ROGUE)
        before = controller.memory_info().rss
        for _ in range(1000):
            assert worker.post("/api/v1/workers", json=ROGUE).status_code == 422
        after = controller.memory_info().rss
    assert cluster.get("/api/v1/workers") == []
    assert after - before < 16 * 2**20, f"controller grew {(after - before) / 2**20:.1f} MiB over 1000 refusals"
    print(f"controller RSS {before / 2**20:.1f} MiB before and {after / 2**20:.1f} MiB after 1000 refusals")
