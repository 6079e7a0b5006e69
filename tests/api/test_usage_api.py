"""GET /api/v1/usage and /usage/series: the store's sums through the API, prices from the config, the window and
grouping checked at the edge, and rows limited to what the caller's role lets it read."""

from __future__ import annotations

import httpx
import pytest

from corral.controller.app import create_app
from corral.controller.settings import ControllerSettings
from corral.core.config import CorralConfig, PoolPrices
from corral.store.database import sqlite_url
from corral.store.store import Store
from tests.api.conftest import ADMIN
from tests.store.usage_fixture import EXPECTED, SINCE, TOTALS, UNTIL, known_usage

WINDOW = {"since": str(SINCE), "until": str(UNTIL)}


@pytest.fixture
async def usage_api(tmp_path):
    """A controller over the known usage, with prices in its config."""
    store = await Store.open(sqlite_url(tmp_path / "corral.db"))
    await known_usage(store)
    await store.close()
    config = CorralConfig(prices={"default": PoolPrices(cpu_hour=3.6, currency="EUR")})
    app = create_app(ControllerSettings(data_dir=tmp_path, admin_token=ADMIN, join_token="join", config=config))

    async with app.router.lifespan_context(app):
        yield httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ctl",
                                headers={"Authorization": f"Bearer {ADMIN}"})


@pytest.mark.parametrize("by", ["project", "user", "pool"])
async def test_usage_by_each_grouping_with_totals_and_cost(usage_api, by):
    async with usage_api as client:
        response = await client.get("/api/v1/usage", params={**WINDOW, "by": by})
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["since"], body["until"], body["by"], body["currency"]) == (SINCE, UNTIL, by, "EUR")
    assert {row["key"]: {f: row[f] for f in TOTALS} for row in body["rows"]} == EXPECTED[by]
    assert {f: body["totals"][f] for f in TOTALS} == TOTALS
    assert body["totals"]["cost"] == sum(row["cost"] for row in body["rows"])
    assert body["totals"]["cost"] == pytest.approx(1200 * 0.001)  # the default pool's core-seconds only


async def test_the_series_has_a_value_per_day(usage_api):
    async with usage_api as client:
        response = await client.get("/api/v1/usage/series", params={"since": str(SINCE), "until": "1970-01-14T00:00Z",
                                                                    "by": "project"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert len(body["starts"]) == 2 and body["bucket"] == "day"
    running = UNTIL - 100  # carol's attempt, still running: it counts up to the series' end
    day = SINCE + 86400
    assert {row["key"]: row["cpu_seconds"] for row in body["rows"]} == {
        "nlp": [500.0 + 49, 0.0],  # bob's attempt after the usage window's end falls in the first day
        "serve": [200.0, 0.0],
        "vision": [800.0 + day - running, body["until"] - day],
    }


@pytest.mark.parametrize("params", [
    {"since": "yesterday"}, {"until": "30x"}, {"since": "2d", "until": "3d"}, {"by": "team"},
    {"since": "1e999"}, {"since": "x" * 65}, {"since": "-1e308", "until": "1e308"}, {"since": "nan"},
])
async def test_a_bad_window_or_grouping_is_refused(usage_api, params):
    async with usage_api as client:
        response = await client.get("/api/v1/usage", params=params)
    assert response.status_code == 422, response.text


async def test_a_series_over_too_many_days_or_buckets_other_than_days_is_refused(usage_api):
    async with usage_api as client:
        assert (await client.get("/api/v1/usage/series", params={"since": "1000d"})).status_code == 422
        assert (await client.get("/api/v1/usage/series", params={"bucket": "hour"})).status_code == 422


async def personal_token(client: httpx.AsyncClient, name: str, role: str) -> dict[str, str]:
    """A user with `role` in project vision, and the header of a personal token of theirs."""
    created = await client.post("/api/v1/users", json={"name": name, "projects": {"vision": role}})
    assert created.status_code in (200, 201), created.text
    token = await client.post("/api/v1/tokens", json={"name": "usage", "user": name})
    assert token.status_code in (200, 201), token.text
    return {"Authorization": f"Bearer {token.json()['token']}"}


async def test_a_member_reads_its_own_usage_and_a_viewer_none(usage_api):
    async with usage_api as client:
        alice, vic = await personal_token(client, "alice", "member"), await personal_token(client, "vic", "viewer")
        mine = await client.get("/api/v1/usage", params={**WINDOW, "by": "user"}, headers=alice)
        viewer = await client.get("/api/v1/usage", params=WINDOW, headers=vic)
    assert [(row["key"], row["attempts"]) for row in mine.json()["rows"]] == [("alice", 2)]
    assert viewer.status_code == 403
    assert "usage" in viewer.json()["detail"]
