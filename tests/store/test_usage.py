"""Usage sums on both stores: a known set of attempts adds up exactly by user, project and pool; attempts are
clipped to the window, a running one counts to its end, a share as its share, a replica as its deployment's."""

from __future__ import annotations

import pytest

from corral.core.config import PoolPrices
from corral.core.roles import Principal, Role
from corral.core.usage import DAY, UsageBy, day_starts, report, series, visibility
from corral.store.usage import usage_sums
from tests.store.helpers import NOW
from tests.store.usage_fixture import EXPECTED, GIB, SINCE, TOTALS, UNTIL, add_job, known_usage

FIELDS = ("attempts", "cpu_seconds", "memory_byte_seconds", "gpu_seconds")


async def read_report(store, by, principal=None, prices=None):
    async with store.read() as connection:
        found = await usage_sums(connection, by, [(SINCE, UNTIL)], UNTIL,
                                 visibility(principal) if principal else None)
    return report(SINCE, UNTIL, by, found, prices or {})


@pytest.mark.parametrize("by", list(UsageBy))
async def test_usage_adds_up_exactly_by_each_grouping(store, by):
    await known_usage(store)
    usage = await read_report(store, by)
    assert {row.key: {f: getattr(row, f) for f in FIELDS} for row in usage.rows} == EXPECTED[by]
    assert {f: getattr(usage.totals, f) for f in FIELDS} == TOTALS
    for field in FIELDS:
        assert getattr(usage.totals, field) == sum(getattr(row, field) for row in usage.rows)
    assert usage.totals.cost is None and usage.currency is None


async def test_prices_per_pool_turn_usage_into_cost(store):
    await known_usage(store)
    prices = {"default": PoolPrices(cpu_hour=3.6, memory_gb_hour=0.36, gpu_hour=36.0, currency="EUR"),
              "a100": PoolPrices(gpu_hour=72.0, currency="EUR")}
    usage = await read_report(store, UsageBy.PROJECT, prices=prices)
    costs = {row.key: row.cost for row in usage.rows}
    # default: per second 0.001 a core, 0.0001 a GiB, 0.01 a device; a100: 0.02 a device only
    assert costs["nlp"] == pytest.approx(500 * 0.001)
    assert costs["serve"] == pytest.approx(200 * 0.001)
    assert costs["vision"] == pytest.approx((400 + 100) * 0.001 + 200 * 0.0001 + 200 * 0.01 + 100 * 0.02)
    assert usage.totals.cost == sum(row.cost for row in usage.rows)
    assert usage.currency == "EUR"


async def test_a_window_clips_attempts_to_it(store):
    await add_job(store, "alice", [(NOW - 100, NOW + 50), (NOW + 950, NOW + 1200), (NOW + 2000, NOW + 2100)])
    usage = await read_report(store, UsageBy.USER)
    assert [(row.key, row.attempts, row.cpu_seconds) for row in usage.rows] == [("alice", 2, 100.0)]


async def test_what_a_caller_sees_follows_the_role_table(store):
    await known_usage(store)
    member = Principal(name="alice", projects={"vision": Role.MEMBER, "nlp": Role.VIEWER})
    usage = await read_report(store, UsageBy.USER, member)
    assert [(row.key, row.attempts) for row in usage.rows] == [("alice", 2)]  # its own, in vision only
    project_admin = Principal(name="erin", projects={"nlp": Role.PROJECT_ADMIN})
    usage = await read_report(store, UsageBy.PROJECT, project_admin)
    assert [(row.key, row.cpu_seconds) for row in usage.rows] == [("nlp", 500.0)]
    assert (await read_report(store, UsageBy.PROJECT, Principal(name="vic", projects={"vision": Role.VIEWER}))
            ).rows == []
    admin = await read_report(store, UsageBy.PROJECT, Principal(name="admin", cluster_admin=True))
    assert admin.totals.attempts == TOTALS["attempts"]


async def test_a_series_splits_attempts_across_days(store):
    await add_job(store, "alice", [(NOW + DAY - 100, NOW + DAY + 300)], project="vision",
                  resources={"cpu": 2, "memory": GIB, "gpu": 0.5})
    await add_job(store, "bob", [(NOW + 10, NOW + 20)], project="nlp")
    starts = day_starts(NOW, NOW + 2 * DAY)
    async with store.read() as connection:
        found = await usage_sums(connection, UsageBy.PROJECT, [(s, s + DAY) for s in starts], NOW + 2 * DAY)
    got = series(NOW, NOW + 2 * DAY, UsageBy.PROJECT, starts, found, {})
    assert got.starts == [NOW, NOW + DAY]
    assert [(row.key, row.cpu_seconds, row.gpu_seconds, row.memory_byte_seconds) for row in got.rows] == [
        ("nlp", [10.0, 0.0], [0.0, 0.0], [0.0, 0.0]),
        ("vision", [200.0, 600.0], [50.0, 150.0], [100.0 * GIB, 300.0 * GIB]),
    ]
