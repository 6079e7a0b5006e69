"""Whether a submission directory's files must be uploaded: the workers that share it, by pool."""

from __future__ import annotations

import hashlib

import pytest

HERE, ELSEWHERE = "a" * 32, "b" * 32


def worker(name: str, pool: str = "default", **fields) -> dict:
    return {"name": name, "address": "10.0.0.1", "capacity": {"cpu": 4, "memory": 2**32, "gpu": 0}, "pool": pool,
            **fields}


async def register(api, *bodies) -> None:
    async with api.as_("join-token") as client:
        for body in bodies:
            answer = await client.post("/api/v1/workers", json=body)
            assert answer.status_code == 200, answer.text


def query(path="/home/a/proj", filesystem=HERE, **more) -> dict:
    return {"path": path, "filesystem": filesystem, **more}


async def test_no_worker_alive_means_nothing_shares(api):
    async with api.admin() as admin:
        answer = await admin.get("/api/v1/workdir/sharing", params=query())
    assert answer.json() == {"alive": 0, "sharing": 0, "upload_needed": True}


async def test_workers_share_by_file_system_or_shared_directory_within_the_pool(api):
    await register(api, worker("same", filesystem=HERE), worker("nfs", filesystem=ELSEWHERE, shared_fs=["/home"]),
                   worker("other", filesystem=ELSEWHERE), worker("gpu", pool="gpu", filesystem=HERE))
    async with api.admin() as admin:
        default = (await admin.get("/api/v1/workdir/sharing", params=query())).json()
        gpu = (await admin.get("/api/v1/workdir/sharing", params=query(pool="gpu"))).json()
        listed = {w["name"]: w for w in (await admin.get("/api/v1/workers")).json()}
    assert default == {"alive": 3, "sharing": 2, "upload_needed": True}
    assert gpu == {"alive": 1, "sharing": 1, "upload_needed": False}
    assert listed["nfs"]["filesystem"] == ELSEWHERE and listed["nfs"]["shared_fs"] == ["/home"]


async def test_a_job_token_may_ask(api):
    async with api.job(7) as task:
        answer = await task.get("/api/v1/workdir/sharing", params=query())
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize("params", [
    query(path="relative/dir"), query(path="/" + "x" * 5000), query(filesystem="XYZ"), query(filesystem="a" * 65),
    query(pool="bad pool"), {"path": "/x"}, {"filesystem": HERE},
])
async def test_bad_questions_are_a_422(api, params):
    async with api.admin() as admin:
        answer = await admin.get("/api/v1/workdir/sharing", params=params)
    assert answer.status_code == 422, answer.text


async def test_without_a_token_it_is_a_401(api):
    async with api.as_("wrong") as client:
        assert (await client.get("/api/v1/workdir/sharing", params=query())).status_code == 401


@pytest.mark.parametrize("fields", [{"filesystem": "not-hex"}, {"shared_fs": ["relative"]},
                                    {"shared_fs": ["/x"] * 65}])
async def test_a_registration_with_a_bad_file_system_is_a_422(api, fields):
    async with api.as_("join-token") as client:
        answer = await client.post("/api/v1/workers", json=worker("w", **fields))
    assert answer.status_code == 422, answer.text


@pytest.mark.parametrize("path", ["/a%00b", "/" + "a" * 5000])
async def test_a_path_no_directory_can_have_is_a_422_not_a_500(api, path):
    async with api.admin() as admin:
        answer = await admin.get(f"/api/v1/workdir/sharing?path={path}&filesystem={HERE}")
        undecodable = await admin.get(f"/api/v1/workdir/sharing?path=/caf%ED%B3%A9&filesystem={HERE}")
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"][0]["loc"][0] == "query"
    assert undecodable.status_code == 200  # read as U+FFFD, as every query string is: a path, shared by none


async def test_a_submission_on_condition_of_a_shared_workdir_is_refused_where_its_files_must_travel(api):
    """`POST /jobs?shared_workdir=true` stores the job where every alive worker of its pool shares its directory,
    and is refused with 409 and `upload_needed`, storing nothing, where one does not or none is alive; a job with a
    bundle, or none, or without the condition, is stored as ever."""
    job = {"command": ["true"], "workdir": query()}
    async with api.admin() as admin:
        alone = await admin.post("/api/v1/jobs", json=job, params={"shared_workdir": "true"})
        await register(api, worker("same", filesystem=HERE), worker("gpu", pool="gpu", filesystem=ELSEWHERE))
        shared = await admin.post("/api/v1/jobs", json=job, params={"shared_workdir": "true"})
        not_shared = await admin.post("/api/v1/jobs", json={**job, "pool": "gpu"}, params={"shared_workdir": "true"})
        unconditional = await admin.post("/api/v1/jobs", json={**job, "pool": "gpu"})
        bundle = hashlib.sha256(b"files").hexdigest()
        api.app.state.services.bundles.put(bundle, b"files")
        bundled = await admin.post("/api/v1/jobs", json={**job, "pool": "gpu", "bundle": bundle},
                                   params={"shared_workdir": "true"})
        listed = (await admin.get("/api/v1/jobs")).json()["items"]
    assert alone.status_code == 409 and alone.json()["detail"] == {
        "message": "no worker of pool default is alive: upload its files as a bundle first",
        "alive": 0, "sharing": 0, "upload_needed": True}
    assert not_shared.status_code == 409 and not_shared.json()["detail"]["message"] == (
        "1 of the 1 alive workers of pool gpu do not share /home/a/proj: upload its files as a bundle first")
    assert [answer.status_code for answer in (shared, unconditional, bundled)] == [201] * 3
    assert sorted(job["id"] for job in listed) == sorted(a.json()["id"] for a in (shared, unconditional, bundled))
