"""Job tokens, launched jobs and function results over the HTTP API, with every refusal named."""

from __future__ import annotations

from corral.controller.results import MAX_RESULT

JOB = {"command": ["true"], "name": "driver"}


async def submit(client, **spec) -> dict:
    response = await client.post("/api/v1/jobs", json={**JOB, **spec})
    assert response.status_code == 201, response.text
    return response.json()


async def test_a_job_token_submits_children_that_record_their_launcher_and_a_path_name(api):
    async with api.admin() as admin:
        driver = await submit(admin)
    async with api.job(driver["id"]) as task:
        child = await submit(task, name="trial")
        async with api.job(child["id"]) as grandchild_task:
            grandchild = await submit(grandchild_task, name="step")
        assert (child["launched_by"], child["name"]) == (driver["id"], "driver/trial")
        assert (grandchild["launched_by"], grandchild["name"]) == (child["id"], "driver/trial/step")
        listed = (await task.get("/api/v1/jobs", params={"launched_by": driver["id"]})).json()["items"]
        assert [j["id"] for j in listed] == [child["id"]]
    async with api.admin() as admin:
        history = (await admin.get(f"/api/v1/jobs/{child['id']}/history")).json()
        assert history[0]["message"] == f"1 task(s), launched by job {driver['id']}"


async def test_a_job_token_reaches_its_launch_tree_only(api):
    async with api.admin() as admin:
        driver, other = await submit(admin), await submit(admin, name="other")
    async with api.job(driver["id"]) as task:
        child = await submit(task)
        assert (await task.get(f"/api/v1/jobs/{child['id']}")).status_code == 200
        refused = await task.get(f"/api/v1/jobs/{other['id']}")
        assert refused.status_code == 403
        assert refused.json()["detail"] == (f"the token of job {driver['id']} reaches only that job and the jobs "
                                            f"launched from it, not job {other['id']}")
        assert (await task.post(f"/api/v1/jobs/{other['id']}/cancel")).status_code == 403
        assert (await task.get(f"/api/v1/jobs/{other['id']}/tasks/0/logs")).status_code == 403
        listed = {j["id"] for j in (await task.get("/api/v1/jobs")).json()["items"]}
        assert listed == {driver["id"], child["id"]}
        assert (await task.get("/api/v1/workers")).status_code == 401  # the cluster's machines are not its business
    async with api.job(child["id"]) as child_task:
        assert (await child_task.get(f"/api/v1/jobs/{driver['id']}")).status_code == 403  # not upward either


async def test_tokens_that_are_not_the_admin_or_a_jobs_are_refused(api):
    for token in ("nope", "cj_1_" + "0" * 40, "cj_x_y"):
        async with api.as_(token) as client:
            response = await client.get("/api/v1/jobs")
            assert response.status_code == 401
            assert response.json()["detail"] == "wrong token"


async def test_an_ending_launcher_cannot_launch(api):
    async with api.admin() as admin:
        driver = await submit(admin)
        assert (await admin.post(f"/api/v1/jobs/{driver['id']}/cancel")).status_code == 200
        jobs_before = (await admin.get("/api/v1/jobs")).json()["items"]
    async with api.job(driver["id"]) as task:
        refused = await task.post("/api/v1/jobs", json=JOB)
    assert refused.status_code == 409
    assert "an ending job cannot launch jobs" in refused.json()["detail"]
    async with api.admin() as admin:
        assert (await admin.get("/api/v1/jobs")).json()["items"] == jobs_before  # nothing stored


async def test_results_are_stored_per_attempt_by_the_jobs_own_token(api):
    async with api.admin() as admin:
        job, other = await submit(admin), await submit(admin)
    url = f"/api/v1/jobs/{job['id']}/tasks/0/result"
    async with api.job(job["id"]) as task:
        pending = await task.get(url, params={"wait": 0.05})
        assert pending.status_code == 202
        assert pending.json()["detail"] == f"task 0 of job {job['id']} is PENDING; no result yet"
        assert (await task.put(url, params={"attempt": 0}, content=b"envelope")).status_code == 204
        stored = await task.get(url)
        assert (stored.status_code, stored.content, stored.headers["X-Corral-Attempt"]) == (200, b"envelope", "0")
        stale = await task.put(url, params={"attempt": 3}, content=b"x")
        assert stale.status_code == 409
        assert stale.json()["detail"] == f"task 0 of job {job['id']} runs attempt 0 now, not 3"
        missing = await task.get(f"/api/v1/jobs/{job['id']}/tasks/5/result")
        assert (missing.status_code, missing.json()["detail"]) == (
            404, f"job {job['id']} has no task 5 (its tasks are 0 to 0)")
    async with api.job(other["id"]) as stranger:
        assert (await stranger.put(url, params={"attempt": 0}, content=b"x")).status_code == 403
    async with api.job(job["id"]) as task:
        child = await submit(task)
        refused = await task.put(f"/api/v1/jobs/{child['id']}/tasks/0/result", params={"attempt": 0}, content=b"x")
        assert (refused.status_code, refused.json()["detail"]) == (
            403, f"only a task of job {child['id']} stores its results")  # a launcher reads them, never writes
    async with api.admin() as admin:
        assert (await admin.get(url)).content == b"envelope"  # the refusals changed nothing


async def test_a_result_over_the_limit_is_refused_and_not_stored(api):
    async with api.admin() as admin:
        job = await submit(admin)
        url = f"/api/v1/jobs/{job['id']}/tasks/0/result"
        refused = await admin.put(url, params={"attempt": 0}, content=b"x" * (MAX_RESULT + 1))
        assert refused.status_code == 413
        assert refused.json()["detail"].startswith(f"the result ({MAX_RESULT + 1} bytes or more) is over the "
                                                   "limit of 16 MiB")
        assert (await admin.get(url)).status_code == 202


async def test_a_task_that_ends_without_a_result_says_how_it_ended(api):
    async with api.admin() as admin:
        job = await submit(admin)
        await admin.post(f"/api/v1/jobs/{job['id']}/cancel")
        response = await admin.get(f"/api/v1/jobs/{job['id']}/tasks/0/result", params={"wait": 5})
    assert response.status_code == 404
    assert response.json()["detail"].startswith(f"task 0 of job {job['id']} ended KILLED without a result")
