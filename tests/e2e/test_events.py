"""End to end: the event stream over real HTTP, resumed after a drop, and a burst delivered in order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import httpx
import pytest

from corral.client.sse import Event, EventParser
from tests.e2e.cluster import Cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e
PY = sys.executable


def parse_sse(lines) -> Iterator[Event]:
    parser = EventParser()
    return (event for event in map(parser.feed, lines) if event is not None)


def read_stream(cluster, until, params=None, headers=None, timeout=30.0) -> list[dict]:
    """Events of a followed stream until `until(events)` holds; a silent stream fails after `timeout`."""
    events: list[dict] = []
    with httpx.Client(base_url=cluster.url, timeout=httpx.Timeout(10, read=timeout)) as http, http.stream(
        "GET", "/api/v1/events", params=params or {},
        headers={"Authorization": f"Bearer {cluster.admin_token}", **(headers or {})},
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for sent in parse_sse(response.iter_lines()):
            event = sent.data
            assert sent.id == str(event["id"]) and sent.type == event["type"]
            events.append(event)
            if until(events):
                return events
    raise AssertionError(f"the stream ended before the condition held; got {len(events)} events")


def stored(cluster, **params) -> list[dict]:
    response = cluster.http.get("/api/v1/events", params={"follow": "false", **params})
    assert response.status_code == 200, response.text
    return [event.data for event in parse_sse(response.text.split("\n"))]


def ended(job_id):
    return lambda events: any(e["job_id"] == job_id and e["type"] == "job.state_changed"
                              and e["to_state"] == "SUCCEEDED" for e in events)


def test_a_reconnect_with_last_event_id_receives_exactly_what_it_missed(cluster):
    check_resume(cluster)


def test_the_stream_resumes_exactly_on_the_postgresql_store(postgres_cluster):
    check_resume(postgres_cluster)


def check_resume(cluster):
    first = cluster.submit(command=["true"])
    before = read_stream(cluster, ended(first))
    missed_job = cluster.submit(command=[PY, "-c", "print('while away')"])  # happens while disconnected
    cluster.wait_end(missed_job)
    after = read_stream(cluster, ended(missed_job), headers={"Last-Event-ID": str(before[-1]["id"])})
    everything = stored(cluster)
    assert before + after == everything[:len(before) + len(after)]
    assert after[0]["id"] == before[-1]["id"] + 1
    assert {e["type"] for e in before} >= {"worker.registered", "job.submitted", "task.state_changed"}
    wait_for(lambda: "corral_event_subscribers 0.0" in cluster.http.get("/metrics").text, 10,
             "the controller to let go of the closed streams")


def test_a_burst_of_a_thousand_events_reaches_a_live_subscriber_in_order(bare_cluster):
    cluster = bare_cluster
    start = stored(cluster, last=1)
    after = start[-1]["id"] if start else 0
    got: list[dict] = []
    failure: list[BaseException] = []

    def subscribe():
        try:
            got.extend(read_stream(cluster, lambda es: sum(e["to_state"] == "KILLED" for e in es) == 1000,
                                   params={"after": after}))
        except BaseException as error:  # reported by the main thread
            failure.append(error)

    reader = threading.Thread(target=subscribe, daemon=True)
    reader.start()
    job_id = cluster.submit(command=["true"], replicas=1000, resources={"cpu": 1})  # no worker: all wait
    assert cluster.http.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 200  # 1,000 kills in one commit
    reader.join(60)
    assert not reader.is_alive() and not failure, failure
    ids = [e["id"] for e in got]
    assert ids == list(range(after + 1, after + 1 + len(ids)))  # in order, none missing, none twice
    killed = [e for e in got if e["type"] == "task.state_changed" and e["to_state"] == "KILLED"]
    assert sorted(e["task_index"] for e in killed) == list(range(1000))
    assert got == stored(cluster, after=after)[:len(got)]


def test_a_job_filter_and_last_n_select_the_events(cluster):
    job_id = cluster.wait_end(cluster.submit(command=["true"]))["id"]
    story = stored(cluster, job=job_id)
    assert story[0]["type"] == "job.submitted" and story[-1]["to_state"] == "SUCCEEDED"
    assert {e["job_id"] for e in story} == {job_id}
    assert stored(cluster, job=job_id, last=2) == story[-2:]


def test_bad_stream_requests_are_refused_with_the_reason(cluster):
    http = cluster.http
    response = http.get("/api/v1/events", headers={"Last-Event-ID": "yesterday"})
    assert response.status_code == 400 and "Last-Event-ID" in response.json()["detail"]
    response = http.get("/api/v1/events", params={"job": 999999})
    assert response.status_code == 404 and "no job 999999" in response.json()["detail"]
    assert http.get("/api/v1/events", params={"after": -1}).status_code == 422
    assert http.get("/api/v1/events", params={"last": 0}).status_code == 422
    assert httpx.get(f"{cluster.url}/api/v1/events").status_code == 401


def test_corral_events_prints_a_jobs_story(cluster):
    job_id = cluster.wait_end(cluster.submit(command=["true"], name="story"))["id"]
    env = {**os.environ, "CORRAL_URL": cluster.url, "CORRAL_TOKEN": cluster.admin_token}
    result = subprocess.run([PY, "-m", "corral", "events", "--job", str(job_id)], capture_output=True, text=True,
                            env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert f"job.submitted job {job_id}" in lines[0]
    assert "job.state_changed" in lines[-1] and "SUCCEEDED" in lines[-1]
    result = subprocess.run([PY, "-m", "corral", "events", "--job", "999999"], capture_output=True, text=True,
                            env=env, timeout=60)
    assert result.returncode == 1 and "no job 999999" in result.stderr


def test_following_events_from_the_cli_sees_a_new_job(cluster):
    env = {**os.environ, "CORRAL_URL": cluster.url, "CORRAL_TOKEN": cluster.admin_token, "PYTHONUNBUFFERED": "1"}
    follower = subprocess.Popen([PY, "-m", "corral", "events", "-f", "--json"], stdout=subprocess.PIPE, text=True,
                                env=env)
    try:
        lines: list[dict] = []
        threading.Thread(target=lambda: [lines.append(json.loads(line)) for line in follower.stdout],
                         daemon=True).start()
        wait_for(lambda: lines, 30, "the follower to print the recent events")
        job_id = cluster.submit(command=["true"])
        wait_for(lambda: ended(job_id)(lines), 30, "the follower to print the job's end")
    finally:
        follower.terminate()
        follower.wait(10)


def test_json_logs_carry_the_ids_a_line_is_about(tmp_path):
    cluster = Cluster(tmp_path, controller_args=("--log-format", "json"))
    try:
        cluster.start_controller()
        cluster.start_worker("w1")
        (worker,) = cluster.get("/api/v1/workers")
        cluster.kill(cluster.workers["w1"])

        def lost_line():
            log = (tmp_path / "controller.log").read_text()
            lines = [json.loads(line) for line in log.splitlines() if line.strip()]  # every line is JSON
            return next((line for line in lines if line.get("worker_id") == worker["id"]), None)

        line = wait_for(lost_line, 30, "the controller to log the lost worker")
        assert line["level"] == "warning" and "LOST" in line["message"] and line["logger"] == "corral.reports"
    finally:
        cluster.stop()


async def test_the_python_clients_read_a_jobs_story_from_the_stream_and_resume_after_an_id(cluster):
    from itertools import islice

    from corral.client import AsyncClient, Client

    job_id = cluster.wait_end(cluster.submit(command=["true"]))["id"]
    story = stored(cluster, job=job_id)
    with Client(cluster.url, cluster.admin_token) as client:
        read = list(islice(client.events(job=job_id), len(story)))
        resumed = list(islice(client.events(job=job_id, last_event_id=str(story[1]["id"])), len(story) - 2))
    assert [(e.id, e.type, e.data["to_state"]) for e in read] == [(str(s["id"]), s["type"], s["to_state"])
                                                                  for s in story]
    assert [e.id for e in resumed] == [str(s["id"]) for s in story[2:]]
    async with AsyncClient(cluster.url, cluster.admin_token) as client:
        seen = []
        async for event in client.events(job=job_id):
            seen.append(event)
            if len(seen) == len(story):
                break
    assert [e.id for e in seen] == [e.id for e in read]
