"""Whether a submission directory's files must be uploaded: the workers that share it, by pool."""

from __future__ import annotations

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
