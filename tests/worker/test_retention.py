"""Attempt directories on a worker: ended ones go after the retention, live and recent ones stay."""

from __future__ import annotations

import os

from corral.worker.retention import last_changes, prune_attempts

DAY = 86400.0
NOW = 1_800_000_000.0


def _attempt(tasks_dir, name: str, changed: float, log_changed: float | None = None):
    directory = tasks_dir / name
    directory.mkdir(parents=True)
    (directory / "stdout").write_text("out\n")
    os.utime(directory / "stdout", (log_changed or changed,) * 2)
    os.utime(directory, (changed, changed))
    return directory


def test_ended_attempts_go_after_the_retention_live_and_recent_ones_stay(tmp_path) -> None:
    tasks_dir = tmp_path / "tasks"
    old = _attempt(tasks_dir, "1-0", NOW - 2 * DAY)
    live = _attempt(tasks_dir, "2-0", NOW - 2 * DAY)
    recent = _attempt(tasks_dir, "3-0", NOW - 0.5 * DAY)
    still_writing = _attempt(tasks_dir, "4-0", NOW - 2 * DAY, log_changed=NOW - 60)
    assert last_changes(tasks_dir)["4-0"] == NOW - 60

    assert prune_attempts(tasks_dir, {"2-0"}, NOW, DAY) == 1
    assert not old.exists()
    assert live.exists() and recent.exists() and still_writing.exists()


def test_no_tasks_directory_yet_is_nothing_to_prune(tmp_path) -> None:
    assert prune_attempts(tmp_path / "tasks", set(), NOW, DAY) == 0
