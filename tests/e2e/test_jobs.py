"""End to end: a real controller and real worker processes running real commands."""

from __future__ import annotations

import sys

import psutil
import pytest

from tests.waiting import wait_for

pytestmark = pytest.mark.e2e
PY = sys.executable


def test_a_job_succeeds_and_its_output_is_in_the_logs(cluster):
    job_id = cluster.submit(command=[PY, "-c", "print(42)"])
    assert cluster.wait_end(job_id)["state"] == "SUCCEEDED"
    assert cluster.logs(job_id) == "42\n"


def test_replicas_each_know_their_index(cluster):
    job_id = cluster.submit(command=["sh", "-c", "echo $CORRAL_TASK_INDEX/$CORRAL_NUM_TASKS"], replicas=4,
                            resources={"cpu": 0.5})
    assert cluster.wait_end(job_id)["state"] == "SUCCEEDED"
    assert [cluster.logs(job_id, task=i) for i in range(4)] == [f"{i}/4\n" for i in range(4)]


def test_a_failing_task_gets_its_retries_then_the_job_fails(cluster):
    job_id = cluster.submit(command=["sh", "-c", "echo try $CORRAL_ATTEMPT >&2; exit 3"], max_retries_failure=2)
    assert cluster.wait_end(job_id)["state"] == "FAILED"
    (task,) = cluster.tasks(job_id)
    assert [(a["attempt"], a["state"], a["exit_code"]) for a in task["attempts"]] == [
        (0, "FAILED", 3), (1, "FAILED", 3), (2, "FAILED", 3)]
    assert cluster.logs(job_id, stream="stderr") == "try 2\n"


def test_cancel_leaves_no_process_of_the_job_alive(cluster, tmp_path):
    pids = tmp_path / "pids"
    script = f"sleep 300 & echo $! >> {pids}; echo $$ >> {pids}; wait"
    job_id = cluster.submit(command=["sh", "-c", script], grace_period=1)
    cluster.wait_state(job_id, "RUNNING")
    wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 2, 10, "the task to write its pids")
    response = cluster.http.post(f"/api/v1/jobs/{job_id}/cancel")
    assert response.status_code == 200, response.text
    assert cluster.wait_end(job_id)["state"] == "CANCELLED"
    (task,) = cluster.tasks(job_id)
    assert task["state"] == "KILLED"
    for pid in map(int, pids.read_text().split()):
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_task_whose_worker_dies_is_retried_on_the_other_worker(cluster):
    job_id = cluster.submit(command=["sh", "-c", 'if [ "$CORRAL_ATTEMPT" = 0 ]; then sleep 300; fi; echo done'])
    cluster.wait_state(job_id, "RUNNING")
    running = wait_for(lambda: (t := cluster.tasks(job_id)[0])["state"] == "RUNNING" and t, 10, "the task to run")
    victim = next(w for w in cluster.get("/api/v1/workers") if w["id"] == running["worker_id"])
    cluster.kill(cluster.workers[victim["name"]])
    assert cluster.wait_end(job_id)["state"] == "SUCCEEDED"
    (task,) = cluster.tasks(job_id)
    first, second = task["attempts"]
    assert (first["state"], first["worker_id"]) == ("WORKER_FAILED", victim["id"])
    assert second["state"] == "SUCCEEDED" and second["worker_id"] != victim["id"]
    assert cluster.logs(job_id) == "done\n"
    workers = {w["id"]: w["state"] for w in cluster.get("/api/v1/workers")}
    assert workers[victim["id"]] == "LOST"


def test_a_controller_killed_and_restarted_loses_no_job_and_runs_none_twice(cluster, tmp_path):
    ledger = tmp_path / "ledger"
    command = ["sh", "-c", f"sleep 0.5; echo $CORRAL_JOB_ID >> {ledger}"]
    job_ids = [cluster.submit(command=command, resources={"cpu": 1}) for _ in range(12)]
    wait_for(lambda: ledger.exists(), 20, "the first job to finish")
    cluster.kill(cluster.controller)
    cluster.start_controller()
    for job_id in job_ids:
        assert cluster.wait_end(job_id, timeout=60)["state"] == "SUCCEEDED"
    assert sorted(map(int, ledger.read_text().split())) == job_ids


def test_a_gang_gets_rendezvous_variables_and_starts_only_when_all_are_prepared(cluster):
    job_id = cluster.submit(command=["sh", "-c", "echo $WORLD_SIZE $RANK $MASTER_ADDR $MASTER_PORT"],
                            replicas=2, gang=True)
    assert cluster.wait_end(job_id)["state"] == "SUCCEEDED"
    outputs = [cluster.logs(job_id, task=i).split() for i in range(2)]
    assert [o[:2] for o in outputs] == [["2", "0"], ["2", "1"]]
    assert outputs[0][2:] == outputs[1][2:]  # one master for both
    history = cluster.get(f"/api/v1/jobs/{job_id}/history")
    prepared = [h["at"] for h in history if h["to_state"] == "PREPARED" and h["task_id"]]
    starting = [h["at"] for h in history if h["to_state"] == "STARTING" and h["task_id"]]
    assert len(prepared) == 2 and len(starting) == 2
    assert min(starting) >= max(prepared)


def test_a_time_limit_kills_the_task(cluster):
    job_id = cluster.submit(command=["sleep", "60"], time_limit=1, grace_period=1)
    assert cluster.wait_end(job_id)["state"] == "FAILED"
    (task,) = cluster.tasks(job_id)
    assert (task["state"], task["reason"]) == ("KILLED", "time limit")


def test_a_job_too_big_for_any_worker_waits_and_says_why(cluster):
    job_id = cluster.submit(command=["true"], resources={"cpu": 64})
    waiting = wait_for(lambda: (j := cluster.job(job_id))["pending_reason"] and j, 10, "a pending reason")
    assert waiting["state"] == "PENDING"
    assert waiting["pending_reason"] == (
        "needs 64 cpu per task; no worker has that much (largest: 4 cpu on w1); waiting for one to join")


def test_idempotent_submission(cluster):
    spec = {"command": ["true"]}
    first = cluster.http.post("/api/v1/jobs", json=spec, headers={"Idempotency-Key": "k1"})
    again = cluster.http.post("/api/v1/jobs", json=spec, headers={"Idempotency-Key": "k1"})
    other = cluster.http.post("/api/v1/jobs", json={"command": ["false"]}, headers={"Idempotency-Key": "k1"})
    assert (first.status_code, again.status_code, other.status_code) == (201, 200, 409)
    assert first.json()["id"] == again.json()["id"]
    assert "k1" in other.json()["detail"]
    assert len(cluster.get("/api/v1/jobs")["items"]) == 1


@pytest.mark.parametrize(("body", "field"), [
    ({"command": ["true"], "colour": "blue"}, "colour"),
    ({"command": []}, "command"),
    ({"command": ["true"], "resources": {"cpu": -1}}, "cpu"),
    ({"command": ["true"], "resources": {"gpu": 100000}}, "gpu"),
    ({"command": ["true"], "resources": {"memory": "lots"}}, "memory"),
    ({"command": ["true"], "replicas": 0}, "replicas"),
    ({"command": ["true"], "env": {"1BAD": "x"}}, "env"),
    ({"command": ["true"], "time_limit": "soon"}, "time_limit"),
])
def test_bad_specs_are_refused_naming_the_field_and_nothing_is_stored(bare_cluster, body, field):
    response = bare_cluster.http.post("/api/v1/jobs", json=body)
    assert response.status_code == 422
    assert field in str(response.json()["detail"])
    assert bare_cluster.get("/api/v1/jobs")["items"] == []


def test_malformed_bodies_and_wrong_tokens_are_refused(bare_cluster):
    http = bare_cluster.http
    malformed = http.post("/api/v1/jobs", content=b"{not json", headers={"content-type": "application/json"})
    assert malformed.status_code == 422 and "JSON" in str(malformed.json()["detail"])
    wrong = http.post("/api/v1/jobs", json={"command": ["true"]}, headers={"Authorization": "Bearer nope"})
    assert (wrong.status_code, wrong.json()["detail"]) == (401, "wrong token")
    missing = http.get("/api/v1/jobs", headers={"Authorization": ""})
    assert missing.status_code == 401
    worker_token = http.post("/api/v1/jobs", json={"command": ["true"]},
                             headers={"Authorization": f"Bearer {bare_cluster.join_token}"})
    assert worker_token.status_code == 401  # the join token registers workers, nothing more
    unknown_bundle = http.post("/api/v1/jobs", json={"command": ["true"], "bundle": "0" * 64})
    assert unknown_bundle.status_code == 400 and "not uploaded" in unknown_bundle.json()["detail"]
    assert http.get("/api/v1/jobs/999").status_code == 404
    assert bare_cluster.get("/api/v1/jobs")["items"] == []


def test_openapi_document_is_served(bare_cluster):
    document = bare_cluster.get("/api/v1/openapi.json")
    assert "/api/v1/jobs" in document["paths"] and "/api/v1/workers/{worker_id}/heartbeat" in document["paths"]


def test_metrics_parse_and_count_the_handlers_that_ran(cluster):
    from prometheus_client.parser import text_string_to_metric_families

    cluster.wait_end(cluster.submit(command=["true"]))
    response = cluster.http.get("/metrics")
    assert response.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    outcomes = {(s.labels["handler"], s.labels["result"]): s.value
                for s in families["corral_handler_outcomes"].samples if s.name.endswith("_total")}
    assert outcomes[("ScheduleJobs", "SUCCESS")] >= 1
    assert ("StartJobs", "SUCCESS") not in outcomes  # an independent task starts with no start order
    assert any(s.value > 0 for s in families["corral_heartbeat_ingest_seconds"].samples
               if s.name.endswith("_count"))


def test_jobs_run_and_survive_a_controller_restart_on_the_postgresql_store(postgres_cluster):
    cluster = postgres_cluster
    gang = cluster.submit(command=["sh", "-c", "echo $RANK"], replicas=2, gang=True)
    failing = cluster.submit(command=["sh", "-c", "exit 3"], max_retries_failure=1)
    assert cluster.wait_end(gang)["state"] == "SUCCEEDED"
    assert cluster.wait_end(failing)["state"] == "FAILED"
    assert [cluster.logs(gang, task=i) for i in range(2)] == ["0\n", "1\n"]
    cluster.kill(cluster.controller)
    cluster.start_controller()
    assert cluster.job(failing)["task_counts"] == {"FAILED": 1}
    assert cluster.wait_end(cluster.submit(command=["true"]))["state"] == "SUCCEEDED"
