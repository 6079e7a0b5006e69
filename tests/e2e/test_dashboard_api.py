"""End to end: what the dashboard reads (job list paging, the queue, the overview) and /metrics."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.waiting import wait_for

pytestmark = pytest.mark.e2e


def test_the_job_list_filters_sorts_and_pages_on_the_server(bare_cluster):
    cluster = bare_cluster
    names = ["alpha", "beta", "gamma_1", "gamma%2", "delta"]
    ids = [cluster.submit(command=["true"], name=name, priority=i) for i, name in enumerate(names)]
    assert cluster.http.post(f"/api/v1/jobs/{ids[1]}/cancel").status_code == 200

    def page(**params):
        response = cluster.http.get("/api/v1/jobs", params=params)
        assert response.status_code == 200, response.text
        return response.json()

    every = page(count=True)
    assert every["total"] == 5 and [j["id"] for j in every["items"]] == ids[::-1]
    assert "total" in page() and page()["total"] is None  # counted only when asked
    assert [j["name"] for j in page(sort="name", order="asc")["items"]] == sorted(names)
    assert [j["priority"] for j in page(sort="priority")["items"]] == [4, 3, 2, 1, 0]
    assert [j["name"] for j in page(name="GAMMA", sort="name", order="asc")["items"]] == ["gamma%2", "gamma_1"]
    assert [j["name"] for j in page(name="a%")["items"]] == ["gamma%2"]  # % is a character, not a wildcard
    assert [j["name"] for j in page(name="a_")["items"]] == ["gamma_1"]
    assert [j["id"] for j in page(state="CANCELLED", count=True)["items"]] == [ids[1]]
    second = page(limit=2, offset=2, sort="id", order="asc", count=True)
    assert [j["id"] for j in second["items"]] == ids[2:4] and second["total"] == 5
    assert page(limit=2, offset=4)["next_cursor"] is None


def test_bad_job_list_requests_are_refused_by_name(bare_cluster):
    http = bare_cluster.http
    response = http.get("/api/v1/jobs", params={"cursor": 5, "sort": "name"})
    assert response.status_code == 400 and "cursor" in response.json()["detail"]
    assert http.get("/api/v1/jobs", params={"sort": "spec"}).status_code == 422
    assert http.get("/api/v1/jobs", params={"order": "up"}).status_code == 422
    assert http.get("/api/v1/jobs", params={"offset": -1}).status_code == 422


def test_the_queue_lists_waiting_jobs_in_scheduling_order_with_their_reason(cluster):
    running = cluster.submit(command=["sleep", "60"], resources={"cpu": 4})
    cluster.wait_state(running, "RUNNING")
    waiting = [cluster.submit(command=["true"], resources={"cpu": 64}, replicas=2) for _ in range(3)]
    queue = wait_for(lambda: (q := cluster.get("/api/v1/queue")) and
                     all(e["job"]["pending_reason"] for e in q["items"]) and q, 30, "the waits to be explained")
    assert queue["total"] == 3
    assert [(e["position"], e["job"]["id"], e["waiting_tasks"]) for e in queue["items"]] == [
        (1, waiting[0], 2), (2, waiting[1], 2), (3, waiting[2], 2)]
    assert "64" in queue["items"][0]["job"]["pending_reason"]
    assert [e["position"] for e in cluster.get("/api/v1/queue", limit=1, offset=1)["items"]] == [2]

    overview = cluster.get("/api/v1/overview")
    summary = overview["summary"]
    assert summary["workers"] == {"ALIVE": 2} and summary["jobs"]["RUNNING"] == 1
    (pool,) = summary["pools"]
    assert pool["capacity"]["cpu"] == 8 and pool["used"]["cpu"] == 4
    assert summary["queue"] == [{"pool": "default", "jobs": 3, "tasks": 6,
                                 "oldest_seconds": summary["queue"][0]["oldest_seconds"]}]
    assert overview["samples"] and set(overview["samples"][0]) == {"at", "used", "capacity", "queued_jobs",
                                                                   "queued_tasks"}


def test_metrics_count_jobs_queue_and_capacity_read_from_the_store(cluster):
    done = cluster.submit(command=["true"])
    cluster.wait_end(done)
    cluster.submit(command=["true"], resources={"cpu": 64})
    response = cluster.http.get("/metrics")
    assert response.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(response.text)}

    def values(name):
        return {tuple(sorted(s.labels.items())): s.value for s in families[name].samples
                if s.name in (name, f"{name}_total")}

    assert values("corral_jobs")[(("state", "SUCCEEDED"),)] == 1
    assert values("corral_jobs")[(("state", "PENDING"),)] == 1
    assert values("corral_tasks")[(("state", "SUCCEEDED"),)] == 1
    assert values("corral_workers") == {(("state", "ALIVE"),): 2}
    assert values("corral_queue_jobs") == {(("pool", "default"),): 1}
    assert values("corral_queue_oldest_seconds")[(("pool", "default"),)] >= 0
    assert values("corral_pool_capacity")[(("pool", "default"), ("resource", "cpu"))] == 8
    assert len(values("corral_worker_capacity")) == 6  # two workers, three resources
    assert values("corral_placements")[()] >= 1
    for name in ("corral_events_sent", "corral_events_pruned", "corral_event_subscribers",
                 "corral_handler_outcomes", "corral_heartbeat_ingest_seconds"):
        assert name in families
