"""End to end: a deployment's story on the event stream, as a replica fails its health check and is replaced."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import httpx
import pytest

from tests.e2e.test_events import read_stream, stored
from tests.e2e.test_serving import deploy, healthy

pytestmark = pytest.mark.e2e


def test_a_failing_health_check_is_unhealthy_then_evicted_then_replaced_on_the_stream(cluster):
    deploy(cluster, "svc")
    deploy(cluster, "bystander")
    (victim,) = healthy(cluster, "svc", 1)
    seen: list[dict] = []

    def told(events: list[dict]) -> bool:
        """The replacement turned healthy, and the victim's process is gone: the two may come in either order."""
        kinds = [(e["type"], e["replica_id"]) for e in events]
        healthy_twice = len([k for k, _ in kinds if k == "replica.healthy"]) > 1
        return healthy_twice and ("replica.terminated", victim["id"]) in kinds

    reader = threading.Thread(target=lambda: seen.extend(read_stream(
        cluster, told, params={"deployment": "svc"}, timeout=60)), daemon=True)
    reader.start()
    assert httpx.post(f"http://{victim['address']}/fail-health", timeout=5).status_code == 200
    reader.join(90)
    assert not reader.is_alive() and seen, "the stream never showed the replacement healthy and the victim ended"
    assert {e["deployment"] for e in seen} == {"svc"}
    story = [(e["type"], e["replica_id"]) for e in seen if e["replica_id"] is not None]
    unhealthy = story.index(("replica.unhealthy", victim["id"]))
    evicted = story.index(("replica.evicted", victim["id"]))
    replaced = next(i for i, (kind, _) in enumerate(story) if kind == "replica.replaced")
    replacement = story[replaced][1]
    assert unhealthy < evicted < replaced < story.index(("replica.healthy", replacement))
    assert ("replica.terminated", victim["id"]) in story
    cause = next(e["message"] for e in seen if e["type"] == "replica.unhealthy")
    assert cause.startswith("health check failed 2 times: 503 from http://") and cause.endswith("/health")
    # the same events are kept, and a reconnect after the eviction resumes right after it
    kept = stored(cluster, deployment="svc")
    assert kept[:len(seen)] == seen
    evicted_id = next(e["id"] for e in seen if e["type"] == "replica.evicted")
    resumed = read_stream(cluster, lambda es: es[-1]["id"] >= seen[-1]["id"], params={"deployment": "svc"},
                          headers={"Last-Event-ID": str(evicted_id)})
    assert resumed == [e for e in kept if e["id"] > evicted_id][:len(resumed)] and resumed[0]["id"] > evicted_id


def test_corral_events_shows_a_deployment_and_refuses_an_unknown_one(cluster):
    deploy(cluster, "svc", model_names=["svc-a", "svc-b"])
    (replica,) = healthy(cluster, "svc", 1)
    board = cluster.get("/api/v1/overview/deployments")
    (shown,) = board["deployments"]
    assert (shown["name"], shown["state"], shown["wanted"], shown["ready"], shown["models"], shown["project"]) == (
        "svc", "READY", 1, 1, ["svc-a", "svc-b"], "default")
    (row,) = shown["replicas"]
    assert (row["id"], row["address"], row["probe_ok"], row["failures"]) == (replica["id"], replica["address"], True, 0)
    assert row["worker_name"] in ("w1", "w2") and row["worker_id"]
    assert row["probe_detail"] == f"200 from http://{replica['address']}/health"
    assert [e["type"] for e in shown["events"]][0] == "deployment.created"
    assert board["summary"] == {"deployments": {"READY": 1}, "wanted": 1, "ready": 1, "unhealthy": 0, "degraded": []}
    assert cluster.get("/api/v1/overview/deployments", events=0)["deployments"][0]["events"] == []
    assert cluster.http.get("/api/v1/overview/deployments", params={"events": -1}).status_code == 422
    env = {**os.environ, "CORRAL_URL": cluster.url, "CORRAL_TOKEN": cluster.admin_token}
    result = subprocess.run([sys.executable, "-m", "corral", "events", "--deployment", "svc"], capture_output=True,
                            text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "deployment.created deployment svc" in lines[0]
    assert any("replica.healthy deployment svc replica" in line for line in lines)
    result = subprocess.run([sys.executable, "-m", "corral", "events", "--deployment", "nobody"],
                            capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 1 and "no deployment named 'nobody'" in result.stderr
    assert cluster.http.get("/api/v1/events", params={"deployment": ""}).status_code == 422
    assert cluster.http.get("/api/v1/events", params={"deployment": "x" * 64}).status_code == 422
