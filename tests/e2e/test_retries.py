"""End to end: failed jobs re-created as a chain of child jobs by a real controller and real workers."""

from __future__ import annotations

import time

import pytest

from tests.waiting import wait_for

pytestmark = pytest.mark.e2e


def chain(cluster, job_id) -> list[dict]:
    return cluster.get(f"/api/v1/jobs/{job_id}/attempts")


def wait_chain(cluster, job_id, length: int, last_state: str, timeout: float = 60) -> list[dict]:
    return wait_for(lambda: len(c := chain(cluster, job_id)) == length and c[-1]["state"] == last_state and c,
                    timeout, f"a chain of {length} from job {job_id} ending {last_state}")


def test_a_job_that_fails_twice_then_succeeds_leaves_a_chain_of_three(cluster, tmp_path):
    tries = tmp_path / "tries"
    script = f'echo try >> {tries}; [ "$(wc -l < {tries})" -ge 3 ]'
    first = cluster.submit(command=["sh", "-c", script],
                           retry_policy={"max_retries": 3, "retry_delay": 0.5, "jitter": "none"})
    attempts = wait_chain(cluster, first, 3, "SUCCEEDED")
    assert [(a["retry_count"], a["state"], a["retry_cause"]) for a in attempts] == [
        (0, "FAILED", "nonzero_exit"), (1, "FAILED", "nonzero_exit"), (2, "SUCCEEDED", "nonzero_exit")]
    assert tries.read_text().count("try") == 3
    ids = [a["id"] for a in attempts]
    last = cluster.job(ids[-1])
    assert (last["parent_job_id"], last["retry_count"], last["retry_chain"]) == (ids[1], 2, ids)
    for parent, child in zip(attempts, attempts[1:], strict=False):
        gap = child["created_at"] - parent["finished_at"]
        assert gap >= 0.5, (parent, child)
    assert cluster.job(first)["retry_state"] == f"attempt 1 of 4; retried as job {ids[1]}"
    events = [h for h in cluster.get(f"/api/v1/jobs/{first}/history") if h["handler"] == "RetryJobs"]
    assert [e["result"] for e in events] == ["NEED_RETRY", "SUCCESS"]
    metrics = cluster.http.get("/metrics").text
    assert 'corral_job_retry_scheduled_total{cause="nonzero_exit"} 2.0' in metrics
    assert "corral_job_retry_succeeded_total 1.0" in metrics


def test_a_job_that_always_fails_ends_with_an_exhausted_chain_of_three(cluster):
    first = cluster.submit(command=["sh", "-c", "exit 7"],
                           retry_policy={"max_retries": 2, "retry_delay": 0.2, "jitter": "none"})
    attempts = wait_chain(cluster, first, 3, "FAILED")
    last = wait_for(lambda: (j := cluster.job(attempts[-1]["id"]))["retry_state"] == "exhausted" and j, 30,
                    "the chain to be exhausted")
    assert [a["state"] for a in chain(cluster, first)] == ["FAILED"] * 3
    events = [h for h in cluster.get(f"/api/v1/jobs/{last['id']}/history") if h["handler"] == "RetryJobs"]
    assert events[-1]["result"] == "GIVE_UP" and "no retry left" in events[-1]["message"]
    assert len(cluster.get("/api/v1/jobs")["items"]) == 3


def test_a_cancelled_job_is_never_retried(cluster):
    job_id = cluster.submit(command=["sleep", "300"], grace_period=1,
                            retry_policy={"max_retries": 3, "retry_delay": 0.1})
    cluster.wait_state(job_id, "RUNNING")
    assert cluster.http.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 200
    assert cluster.wait_end(job_id)["state"] == "CANCELLED"
    job = wait_for(lambda: (j := cluster.job(job_id))["retry_cause"] and j, 30, "the retry decision")
    assert (job["retry_cause"], job["retry_state"]) == ("user_cancelled", "attempt 1 of 4; not retried")
    assert [a["id"] for a in chain(cluster, job_id)] == [job_id]
    assert len(cluster.get("/api/v1/jobs")["items"]) == 1


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_a_controller_killed_while_a_retry_waits_creates_the_child_once_after_restart(store, request):
    cluster = request.getfixturevalue("cluster" if store == "sqlite" else "postgres_cluster")
    first = cluster.submit(command=["sh", "-c", "exit 1"],
                           retry_policy={"max_retries": 1, "retry_delay": 5, "jitter": "none"})
    wait_for(lambda: (cluster.job(first)["retry_state"] or "").startswith("retry scheduled"), 30,
             "the retry to be scheduled")
    killed_at = time.time()
    cluster.kill(cluster.controller)
    cluster.start_controller()
    attempts = wait_chain(cluster, first, 2, "FAILED")
    wait_for(lambda: cluster.job(attempts[-1]["id"])["retry_state"] == "exhausted", 30, "the chain to end")
    jobs = cluster.get("/api/v1/jobs")["items"]
    assert sorted(j["id"] for j in jobs) == [first, attempts[1]["id"]]
    assert [j["parent_job_id"] for j in jobs if j["id"] != first] == [first]
    assert attempts[1]["created_at"] >= max(killed_at, cluster.job(first)["retry_due_at"])  # by the new one
