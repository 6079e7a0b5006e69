"""Streaks of errors about one target: logged once per streak, counted every time, given up on at the limit."""

from __future__ import annotations

import logging

import pytest

from corral.engine.target_errors import GIVE_UP_AFTER, TargetErrors, decide_apart
from corral.metrics import HANDLER_TARGET_ERRORS


def test_a_streak_is_logged_at_its_start_and_its_give_up_only_and_counted_every_run(caplog):
    errors, counted = TargetErrors(), HANDLER_TARGET_ERRORS.labels("Picky")._value.get()
    with caplog.at_level(logging.ERROR, "corral.coordinator"):
        runs = [errors.report("Picky", {7: ValueError("bad row")}) for _ in range(GIVE_UP_AFTER + 2)]
    assert [(r[7].streak, r[7].first, r[7].give_up) for r in runs] == [
        (1, True, False), (2, False, False), (3, False, True), (4, False, True), (5, False, True)]
    assert [r.getMessage() for r in caplog.records] == [
        "job=7 handler Picky failed on it: ValueError: bad row; set aside, the others proceed",
        f"job=7 handler Picky failed on it {GIVE_UP_AFTER} runs in a row: given up"]
    assert HANDLER_TARGET_ERRORS.labels("Picky")._value.get() == counted + GIVE_UP_AFTER + 2
    assert runs[0][7].note("Picky") == "Picky failed on it (ValueError: bad row); set aside, the others proceed"


def test_a_run_without_the_error_ends_the_streak():
    errors = TargetErrors()
    errors.report("Picky", {7: "its spec cannot be read"})
    errors.report("Picky", {})
    assert errors.report("Picky", {7: "its spec cannot be read"})[7].first
    assert not errors.report("Picky", {7: "x"}, give_up_after=None)[7].give_up


def test_decide_apart_leaves_out_exactly_the_owners_execute_raises_about():
    def execute(targets):
        if any(t % 10 == 3 for t in targets):
            raise KeyError("three")
        return sum(targets)

    failed: dict = {}
    decision, kept = decide_apart(execute, list(range(40)), lambda t: t, failed)
    assert sorted(failed) == [3, 13, 23, 33]
    assert kept == [t for t in range(40) if t % 10 != 3] and decision == sum(kept)


def test_an_error_no_owner_causes_alone_is_the_handlers():
    def execute(targets):
        if len(targets) > 1:
            raise RuntimeError("only together")
        return targets

    with pytest.raises(RuntimeError, match="only together"):
        decide_apart(execute, [1, 2], lambda t: t, {})
