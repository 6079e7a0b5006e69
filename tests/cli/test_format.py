import pytest

from corral.cli.format import format_age, format_bytes, format_duration, task_summary


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (5.9, "5s"), (59, "59s"), (60, "1m"), (3 * 60 + 59, "3m"), (2 * 3600 + 5, "2h"),
    (86400 * 4 + 1, "4d"), (-3, "0s"),
])
def test_age(seconds, text):
    assert format_age(seconds) == text


def test_duration():
    assert format_duration(90) == "1m30s"
    assert format_duration(2 * 3600) == "2h"
    assert format_duration(None) == "-"


def test_bytes():
    assert format_bytes(10**9) == "1.0G"
    assert format_bytes(16 * 10**9, compact=True) == "16G"
    assert format_bytes(16 * 2**30, compact=True) == "17.2G"
    assert format_bytes(512) == "512B"


def test_task_summary_puts_the_most_numerous_first_and_skips_zeros():
    assert task_summary({"PENDING": 1, "RUNNING": 3, "FAILED": 0}) == "3 RUNNING, 1 PENDING"
    assert task_summary({"SUCCEEDED": 1, "PENDING": 1}) == "1 PENDING, 1 SUCCEEDED"
    assert task_summary({}) == "-"
