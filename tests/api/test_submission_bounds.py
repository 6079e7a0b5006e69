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
        assert error["msg"].startswith("begin must lie between 2000-01-01 and five years from now (")
        assert error["msg"].endswith(f"), not {begin:g}")
        assert (await admin.get("/api/v1/jobs")).json()["items"] == []


async def test_a_begin_time_within_the_range_is_accepted(api):
    async with api.admin() as admin:
        for begin in (946684800, time.time() + 4 * 365 * 86400, "2030-01-31T08:00"):
            accepted = await admin.post("/api/v1/jobs", json={**JOB, "begin": begin})
            assert accepted.status_code == 201, accepted.text
