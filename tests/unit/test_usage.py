"""Usage's pure parts: prices in the config file, the window's moments, daily buckets, who sees what."""

from __future__ import annotations

import pytest

from corral.core.config import ConfigError, parse_config
from corral.core.roles import Principal, Role
from corral.core.spec import parse_moment
from corral.core.usage import DAY, MAX_BUCKETS, Visibility, day_starts, visibility, window

NOW = 1_800_000_000.0


def test_prices_per_pool_are_read_from_the_config_file():
    config = parse_config("prices:\n  default: {cpu_hour: 0.02, gpu_hour: 2.5, memory_gb_hour: 0.005}\n"
                          "  a100: {gpu_hour: '4'}\n", "corral.yaml")
    assert config.prices["default"].gpu_hour == 2.5 and config.prices["default"].currency == "USD"
    assert config.prices["a100"].cpu_hour == 0.0 and config.prices["a100"].gpu_hour == 4.0
    assert parse_config("{}", "corral.yaml").prices == {}


@pytest.mark.parametrize(("text", "message"), [
    ("prices: {default: {cpu_hour: -1}}", "prices.default.cpu_hour"),
    ("prices: {default: {gpu_hour: .nan}}", "prices.default.gpu_hour"),
    ("prices: {default: {cpu_hours: 1}}", "prices.default.cpu_hours: unknown field"),
    ("prices: {a: {currency: USD}, b: {currency: EUR}}", "the same currency, not EUR, USD"),
    ("prices: {default: {currency: ''}}", "prices.default.currency"),
])
def test_bad_prices_are_refused_naming_the_field(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(text, "corral.yaml")


def test_a_moment_is_unix_seconds_an_iso_time_or_how_long_ago():
    assert parse_moment("1700000000", NOW) == 1_700_000_000.0
    assert parse_moment("30d", NOW) == NOW - 30 * DAY
    assert parse_moment(" 12h ", NOW) == NOW - 12 * 3600
    assert parse_moment("2026-01-31T00:00:00+00:00", NOW) == 1_769_817_600.0
    for bad in ("yesterday", "30x", "", "-3d"):
        with pytest.raises(ValueError):
            parse_moment(bad, NOW)


def test_the_window_defaults_to_the_last_30_days_and_must_not_be_empty():
    assert window(None, None, NOW) == (NOW - 30 * DAY, NOW)
    assert window("7d", "1d", NOW) == (NOW - 7 * DAY, NOW - DAY)
    for since, until in (("1d", "2d"), ("1d", "1d"), ("nan", None), ("1e999", None), ("-1e308", "1e308"),
                         ("-inf", None)):
        with pytest.raises(ValueError):
            window(since, until, NOW)


def test_daily_buckets_cover_the_window_and_are_bounded():
    assert day_starts(0.0, DAY) == [0.0]
    assert day_starts(0.0, DAY + 1) == [0.0, DAY]
    assert len(day_starts(0.0, MAX_BUCKETS * DAY)) == MAX_BUCKETS
    with pytest.raises(ValueError, match="at most"):
        day_starts(0.0, MAX_BUCKETS * DAY + 1)


def test_who_sees_whose_usage_follows_the_role_table():
    assert visibility(Principal(name="root", cluster_admin=True)) is None
    caller = Principal(name="ann", projects={"a": Role.PROJECT_ADMIN, "b": Role.MEMBER, "c": Role.VIEWER})
    assert visibility(caller) == Visibility(projects=frozenset({"a"}), own_projects=frozenset({"b"}), owner="ann")
