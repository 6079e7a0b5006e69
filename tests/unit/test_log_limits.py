"""The log cap's marker, and what retention removes (pure decisions, with a fake clock)."""

from __future__ import annotations

from corral.core.log_limits import (
    DEFAULT_LOG_LIMIT,
    attempts_to_prune,
    logs_to_prune,
    prune_interval,
    truncation_marker,
)

DAY = 86400.0
NOW = 1_800_000_000.0


def test_the_marker_names_the_limit_on_a_line_of_its_own() -> None:
    assert truncation_marker(DEFAULT_LOG_LIMIT) == b"\n[corral: log truncated at 100.0M; further output dropped]\n"
    assert truncation_marker(20_000) == b"\n[corral: log truncated at 20.0K; further output dropped]\n"


def test_logs_go_once_their_job_ended_longer_ago_than_the_retention() -> None:
    on_disk = {1: NOW - 30 * DAY, 2: NOW - 30 * DAY, 3: NOW - 30 * DAY, 4: NOW}
    finished = {1: NOW - 8 * DAY, 2: NOW - 6 * DAY, 3: None, 4: NOW - 8 * DAY}
    assert logs_to_prune(on_disk, finished, NOW, 7 * DAY) == [1, 4]


def test_logs_of_a_task_the_store_does_not_know_go_once_their_directory_is_that_old() -> None:
    on_disk = {10: NOW - 8 * DAY, 11: NOW - 1 * DAY}
    assert logs_to_prune(on_disk, {}, NOW, 7 * DAY) == [10]


def test_the_same_logs_stay_until_the_clock_passes_the_horizon() -> None:
    on_disk, finished = {1: NOW}, {1: NOW}
    assert logs_to_prune(on_disk, finished, NOW + 7 * DAY - 1, 7 * DAY) == []
    assert logs_to_prune(on_disk, finished, NOW + 7 * DAY + 1, 7 * DAY) == [1]


def test_ended_attempt_directories_go_after_the_retention_and_live_ones_never() -> None:
    on_disk = {"1-0": NOW - 2 * DAY, "1-1": NOW - 2 * DAY, "2-0": NOW - 0.5 * DAY, "3-0": NOW - 9 * DAY}
    assert attempts_to_prune(on_disk, {"1-1"}, NOW, DAY) == ["1-0", "3-0"]
    assert attempts_to_prune(on_disk, {"1-1"}, NOW + DAY, DAY) == ["1-0", "2-0", "3-0"]


def test_retention_looks_often_enough_and_not_too_often() -> None:
    assert prune_interval(7 * DAY) == 3600.0
    assert prune_interval(600.0) == 60.0
    assert prune_interval(2.0) == 1.0
