"""The controller's copy of a task's logs: capped per stream per attempt, whatever a worker ships."""

from __future__ import annotations

from corral.controller.files import LogFiles
from corral.core.log_limits import truncation_marker

LIMIT = 1000


def test_what_a_worker_ships_past_the_limit_is_dropped_behind_the_marker(tmp_path) -> None:
    logs = LogFiles(tmp_path, LIMIT)
    logs.write(7, 0, "stdout", 0, b"a" * 600)
    logs.write(7, 0, "stdout", 600, b"b" * 600)
    logs.write(7, 0, "stdout", 1200, b"c" * 10_000)
    logs.write(7, 0, "stdout", 10**12, b"d")  # far past the end: no sparse giant
    data, size = logs.read(7, 0, "stdout", 0)
    assert data == b"a" * 600 + b"b" * 400 + truncation_marker(LIMIT)
    assert size == LIMIT + len(truncation_marker(LIMIT))
    assert logs.path(7, 0, "stdout").stat().st_blocks * 512 < 64 * 1024


def test_a_worker_s_own_marker_at_the_limit_reads_the_same(tmp_path) -> None:
    logs = LogFiles(tmp_path, LIMIT)
    logs.write(7, 0, "stderr", 0, b"e" * LIMIT)
    logs.write(7, 0, "stderr", LIMIT, truncation_marker(LIMIT))
    assert logs.read(7, 0, "stderr", 0)[0] == b"e" * LIMIT + truncation_marker(LIMIT)


def test_output_within_the_limit_is_kept_as_shipped(tmp_path) -> None:
    logs = LogFiles(tmp_path, LIMIT)
    logs.write(7, 1, "stdout", 0, b"x" * LIMIT)
    assert logs.read(7, 1, "stdout", 0) == (b"x" * LIMIT, LIMIT)
