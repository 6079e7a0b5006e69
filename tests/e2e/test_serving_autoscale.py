"""End to end: a deployment follows its load between MIN and MAX, and a replica that never turns healthy fails fast."""

from __future__ import annotations

import re
import sys
import threading
import time

import httpx
import pytest

from tests.e2e.test_serving import deploy, healthy, info, standalone_router
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e


def test_a_deployment_scales_out_under_load_and_back_after_the_delay(cluster):
    deploy(cluster, "auto", min_replicas=1, max_replicas=3, target_concurrency=1, scale_down_delay=3)
    healthy(cluster, "auto", 1)
    statuses: list[int] = []

    def call() -> None:
        statuses.append(cluster.http.get("/serve/auto/slow", params={"seconds": 8}, timeout=60).status_code)

    callers = [threading.Thread(target=call) for _ in range(4)]
    for caller in callers:
        caller.start()
    wait_for(lambda: info(cluster, "auto")["replicas"] == 3, 20, "the autoscaler to want 3 replicas")
    healthy(cluster, "auto", 3)  # the extra replicas start even while requests hold the first
    detail = info(cluster, "auto")
    assert detail["desired_replicas"] == 3 and "target 1 → 3 replicas" in detail["autoscale_reason"]
    for caller in callers:
        caller.join(60)
    assert statuses == [200] * 4
    calm = time.monotonic()
    wait_for(lambda: info(cluster, "auto")["replicas"] == 1, 30, "the autoscaler to come back to 1")
    assert time.monotonic() - calm >= 2  # not before the scale-down delay (3 s, less the requests' tail)
    messages = [h["message"] or "" for h in info(cluster, "auto")["history"] if h["handler"] == "Scale"]
    up = [i for i, m in enumerate(messages)
          if re.fullmatch(r"\d -> 3 replicas: autoscale: load [\d.]+ over 3 s, target 1 → 3 replicas", m)]
    assert up, messages
    # Down by the peak over the delay: in one step, or in two where the requests ended apart (a loaded machine
    # starts the callers apart), the last once at most one request was left in the window.
    down = messages[up[-1] + 1:]
    assert down and all(re.fullmatch(r"\d -> \d replicas: autoscale: peak load \d over 3 s, target 1 → \d replicas",
                                     m) for m in down), messages
    assert re.match(r"[23] -> 1 replicas: autoscale: peak load [01] over", down[-1]), messages
    healthy(cluster, "auto", 1)


def test_bad_autoscaling_fields_are_refused_and_nothing_is_stored(cluster):
    for fields in ({"target_concurrency": 0}, {"scale_down_delay": -1}, {"min_replicas": 2, "max_replicas": 1},
                   {"health": {"startup_timeout": 0}}):
        response = cluster.http.post("/api/v1/deployments", json={"name": "bad", "command": ["x"], **fields})
        assert response.status_code == 422, (fields, response.text)
    assert cluster.get("/api/v1/deployments") == []


def test_a_replica_that_never_turns_healthy_fails_its_waiting_request_after_the_startup_timeout(cluster):
    deploy(cluster, "mute", min_replicas=0, command=[sys.executable, "-c", "import time; time.sleep(600)"],
           health={"interval": 0.3, "threshold": 2, "timeout": 1, "startup_timeout": 3})
    started = time.monotonic()
    response = cluster.http.get("/serve/mute/whoami", timeout=60)
    waited = time.monotonic() - started
    assert response.status_code == 503, response.text
    assert re.search(r"could not start: .*health check failed \d+ times: ", response.json()["error"]["message"])
    assert 3 <= waited < 15
    def evicted():
        history = info(cluster, "mute")["history"]
        return any(h["handler"] == "HealthCheckReplica" and h["to_state"] == "UNHEALTHY" for h in history) and \
            any(h["handler"] == "ReplicaEviction" and h["to_state"] == "TERMINATING" for h in history)
    wait_for(evicted, 20, "the replica to be judged UNHEALTHY and evicted")


def test_load_at_a_standalone_router_scales_the_deployment_through_the_controller(cluster):
    with standalone_router(cluster) as router:
        deploy(cluster, "far", min_replicas=1, max_replicas=2, target_concurrency=1, scale_down_delay=2)
        healthy(cluster, "far", 1)
        url = f"{router}/serve/far/slow"
        headers = {"Authorization": f"Bearer {cluster.admin_token}"}
        wait_for(lambda: _status(url, headers) == 200, 30, "the standalone router to serve 'far'")
        callers = [threading.Thread(target=_status, args=(url, headers, 8)) for _ in range(3)]
        for caller in callers:
            caller.start()
        wait_for(lambda: info(cluster, "far")["replicas"] == 2, 20, "the controller to scale on the router's load")
        for caller in callers:
            caller.join(60)
        wait_for(lambda: info(cluster, "far")["replicas"] == 1, 30, "the scale-down once the router is idle")
    bad = cluster.http.post("/api/v1/router/load", json={"router": "r", "loads": {"far": -1}})
    assert bad.status_code == 422 and "counts of requests" in bad.text


def _status(url: str, headers: dict, seconds: float = 0) -> int:
    """The status of a GET to /slow, or 0 while nothing answers."""
    try:
        return httpx.get(url, params={"seconds": seconds}, headers=headers, timeout=60).status_code
    except httpx.HTTPError:
        return 0
