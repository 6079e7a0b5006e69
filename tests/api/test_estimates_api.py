"""Start estimates through the API: a pending job's view carries its estimate, and /stats/estimates reports how right
they were; its query string is checked at the edge."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import insert

from corral.controller.services import services_of
from corral.store.schema import estimate_records
from tests.api.conftest import api as api  # noqa: F401 (the fixture)
from tests.waiting import wait_until_answered


async def test_a_pending_job_says_when_it_starts(api):  # noqa: F811
    async with api.admin() as admin:
        job = (await admin.post("/api/v1/jobs", json={"command": ["true"]})).json()

        async def estimate():
            view = (await admin.get(f"/api/v1/jobs/{job['id']}")).json()
            return view["estimate"]

        found = await wait_until_answered(estimate, 15, "the estimator to estimate the job")
        assert found["start_at"] is None and found["never"]
        assert found["text"] == "unknown: no worker is alive; waiting for one to register"
        listed = (await admin.get("/api/v1/jobs")).json()
        assert listed["items"][0]["estimate"]["text"] == found["text"]


async def test_estimate_stats_by_horizon(api):  # noqa: F811
    now = time.time()
    async with services_of_app(api).store.write() as connection:
        await connection.execute(insert(estimate_records), [
            dict(job_id=1, made_at=now - 400, start_at=now - 100, started_at=now - 50),
            dict(job_id=2, made_at=now - 400, start_at=now - 10, started_at=now - 50),
            dict(job_id=3, made_at=now - 100, start_at=now - 60, started_at=None)])  # not started: not counted
    async with api.admin() as admin:
        stats = (await admin.get("/api/v1/stats/estimates")).json()
    assert stats["count"] == 2
    (row,) = stats["horizons"]
    assert (row["horizon"], row["count"], row["median_error"]) == ("1-10 min", 2, pytest.approx(45))


@pytest.mark.parametrize("days", ["0", "-1", "abc", "1e9", "nan", ""])
async def test_bad_days_are_refused_with_422(api, days):  # noqa: F811
    async with api.admin() as admin:
        answer = await admin.get("/api/v1/stats/estimates", params={"days": days})
    assert answer.status_code == 422


async def test_stats_need_a_token(api):  # noqa: F811
    async with api.as_("no-such-token") as stranger:
        assert (await stranger.get("/api/v1/stats/estimates")).status_code == 401


def services_of_app(api):  # noqa: F811
    class _Request:
        app = api.app
    return services_of(_Request())
