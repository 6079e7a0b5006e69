"""What a submission may ask for: a begin time in a sane range, and for a job's own children no more than it has."""

from __future__ import annotations

import time

import pytest

JOB = {"command": ["true"], "name": "driver"}


@pytest.mark.parametrize("begin", [1e20, 0, 946684799, time.time() + 6 * 365 * 86400])
async def test_a_begin_time_outside_2000_to_five_years_ahead_is_refused_and_nothing_stored(api, begin):
    async with api.admin() as admin:
        refused = await admin.post("/api/v1/jobs", json={**JOB, "begin": begin})
        assert refused.status_code == 422
        (error,) = refused.json()["detail"]
        assert error["loc"] == ["body", "begin"]
        assert error["msg"].startswith("must lie between 2000-01-01 and five years from now (")
        assert error["msg"].endswith(f"), not {begin:g}")
        assert (await admin.get("/api/v1/jobs")).json()["items"] == []


async def test_a_begin_time_within_the_range_is_accepted(api):
    async with api.admin() as admin:
        for begin in (946684800, time.time() + 4 * 365 * 86400, "2030-01-31T08:00"):
            accepted = await admin.post("/api/v1/jobs", json={**JOB, "begin": begin})
            assert accepted.status_code == 201, accepted.text


async def submit(client, **spec) -> dict:
    response = await client.post("/api/v1/jobs", json={**JOB, **spec})
    assert response.status_code == 201, response.text
    return response.json()


async def test_a_child_asking_for_another_project_or_more_priority_is_refused_and_nothing_stored(api):
    async with api.admin() as admin:
        driver = await submit(admin, project="ml", priority="high")
    async with api.job(driver["id"]) as task:
        other = await task.post("/api/v1/jobs", json={**JOB, "project": "other"})
        assert (other.status_code, other.json()["detail"]) == (
            403, f"job {driver['id']} runs in project ml: the jobs it launches run there too, not in project other")
        higher = await task.post("/api/v1/jobs", json={**JOB, "priority": "critical"})
        assert (higher.status_code, higher.json()["detail"]) == (
            403, f"job {driver['id']} runs at priority 100 (high): the jobs it launches may ask for that or less, "
                 "not 1000 (critical)")
        both = await task.post("/api/v1/jobs", json={**JOB, "priority": 101, "project": "ml"})
        assert both.status_code == 403 and "not 101" in both.json()["detail"]
    async with api.admin() as admin:
        assert [j["id"] for j in (await admin.get("/api/v1/jobs")).json()["items"]] == [driver["id"]]


async def test_a_child_inherits_its_launchers_project_and_priority_unless_it_asks_for_less(api):
    async with api.admin() as admin:
        driver = await submit(admin, project="ml", priority="high")
    async with api.job(driver["id"]) as task:
        inherited = await submit(task)
        same = await submit(task, project="ml", priority=100)
        lower = await submit(task, priority="low")
    assert (inherited["spec"]["project"], inherited["priority"]) == ("ml", 100)
    assert (same["spec"]["project"], same["priority"]) == ("ml", 100)
    assert (lower["spec"]["project"], lower["priority"]) == ("ml", -100)
    async with api.job(lower["id"]) as grandchild_task:  # bounded by its own launcher, further down the tree
        refused = await grandchild_task.post("/api/v1/jobs", json={**JOB, "priority": "normal"})
        assert refused.status_code == 403 and "runs at priority -100 (low)" in refused.json()["detail"]


async def test_a_childs_idempotent_replay_answers_for_the_same_bounded_spec(api):
    async with api.admin() as admin:
        driver = await submit(admin, project="ml")
    async with api.job(driver["id"]) as task:
        first = await task.post("/api/v1/jobs", json=JOB, headers={"Idempotency-Key": "step-1"})
        again = await task.post("/api/v1/jobs", json=JOB, headers={"Idempotency-Key": "step-1"})
    assert (first.status_code, again.status_code, again.json()["id"]) == (201, 200, first.json()["id"])


async def test_a_job_token_cannot_read_another_tree_through_an_idempotency_key(api):
    async with api.admin() as admin:
        driver = await submit(admin)
        private = await admin.post("/api/v1/jobs", json={**JOB, "name": "private"}, headers={"Idempotency-Key": "k"})
    async with api.job(driver["id"]) as task:
        replay = await task.post("/api/v1/jobs", json={**JOB, "name": "private"}, headers={"Idempotency-Key": "k"})
    assert replay.status_code == 409
    assert replay.json()["detail"] == (f"idempotency key 'k' is taken by a job that the token of job {driver['id']} "
                                       "does not reach")
    assert str(private.json()["id"]) not in replay.text


async def test_a_child_may_wait_only_on_jobs_its_token_reaches(api):
    async with api.admin() as admin:
        driver, stranger = await submit(admin), await submit(admin, name="stranger")
    async with api.job(driver["id"]) as task:
        sibling = await submit(task, name="first")
        await submit(task, after=[sibling["id"]], after_any=[driver["id"]])
        refused = await task.post("/api/v1/jobs", json={**JOB, "after_any": [stranger["id"]]})
    assert (refused.status_code, refused.json()["detail"]) == (
        403, f"the token of job {driver['id']} reaches only that job and the jobs launched from it, "
             f"not job {stranger['id']}")


async def test_a_job_token_reaches_no_route_that_could_escalate_it(api):
    """Deployments, retry policies, placement, workers and the event stream stay the admin's (a guard: so they were)."""
    async with api.admin() as admin:
        driver = await submit(admin)
    calls = [("POST", "/api/v1/deployments", {"name": "svc", "command": ["serve"]}),
             ("PUT", "/api/v1/admin/retry-policy", {"max_retries": 5}),
             ("GET", f"/api/v1/jobs/{driver['id']}/placement", None),
             ("POST", "/api/v1/workers", {"name": "rogue"}),
             ("GET", "/api/v1/events", None)]
    async with api.job(driver["id"]) as task:
        for method, path, body in calls:
            response = await task.request(method, path, json=body)
            assert response.status_code == 401, (path, response.text)
