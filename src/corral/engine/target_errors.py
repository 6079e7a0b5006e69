"""Errors about one target of a handler run: that target is set aside and the others proceed.

A handler decides for many targets at once. An exception about one of them (a stored row no
validation caught, a bug that one input reaches) must not stop the run for all the others, pass
after pass. The coordinators leave such a target out of the run and report it here, once per run:
every error is counted, the first of a streak is logged (with its traceback) and recorded in the
target's history, and a target that fails `GIVE_UP_AFTER` runs in a row is given up on (a job
ends FAILED with the cause), since an error that repeats on the same row will not go away.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from corral.metrics import HANDLER_TARGET_ERRORS

log = logging.getLogger("corral.coordinator")

T = TypeVar("T")
D = TypeVar("D")

GIVE_UP_AFTER = 3  # runs in a row that fail on the same target before it is given up on


@dataclass(frozen=True)
class TargetError:
    """What went wrong with one target, and how many runs in a row it has gone wrong."""

    cause: str
    streak: int
    give_up: bool = False  # the streak reached the limit: the caller gives the target up

    @property
    def first(self) -> bool:
        return self.streak == 1

    def note(self, handler: str) -> str:
        """The history record's sentence."""
        if self.give_up:
            return f"{handler} failed on it {self.streak} runs in a row ({self.cause}); given up"
        return f"{handler} failed on it ({self.cause}); set aside, the others proceed"


class FailedOn(Exception):
    """Writing about one target failed: its run is rolled back and made again without that target."""

    def __init__(self, target: Hashable, error: Exception) -> None:
        super().__init__(target, error)
        self.target, self.error = target, error


def describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:500]


class TargetErrors:
    """Streaks of errors per handler and target, kept for the life of the controller."""

    def __init__(self) -> None:
        self._streaks: dict[str, dict[Hashable, int]] = {}

    def report(self, handler: str, failed: Mapping[Hashable, BaseException | str], entity: str = "job",
               give_up_after: int | None = GIVE_UP_AFTER) -> dict[Hashable, TargetError]:
        """One run's failures (target id -> the exception, or a cause); a target not among them ends its streak.
        None for `give_up_after`: the caller has no way to give a target up, and sets it aside every run."""
        before = self._streaks.get(handler, {})
        streaks = {key: before.get(key, 0) + 1 for key in failed}
        self._streaks[handler] = streaks
        errors = {}
        for key, error in failed.items():
            cause = error if isinstance(error, str) else describe(error)
            give_up = give_up_after is not None and streaks[key] >= give_up_after
            errors[key] = TargetError(cause, streaks[key], give_up)
            HANDLER_TARGET_ERRORS.labels(handler).inc()
            if streaks[key] == 1:
                log.error("%s=%s handler %s failed on it: %s; set aside, the others proceed", entity, key, handler,
                          cause, exc_info=error if isinstance(error, BaseException) else None)
            elif streaks[key] == give_up_after:
                log.error("%s=%s handler %s failed on it %d runs in a row: given up", entity, key, handler,
                          streaks[key])
        return errors


def decide_apart(execute: Callable[[list[T]], D], targets: Sequence[T], owner: Callable[[T], Hashable],
                 failed: dict) -> tuple[D, list[T]]:
    """`execute(targets)`, or, when it raises, `execute` of the targets it does not raise about.

    A handler's `execute` is pure, so it is run again on halves of the owners (a job and all its targets
    together) to find those it raises about on their own, a few runs each, which go to `failed`. An error no
    owner causes alone is the handler's own: it propagates, and the run rolls back as a whole.
    """
    targets = list(targets)
    while True:
        try:
            return execute(targets), targets
        except Exception as error:
            groups: dict[Hashable, list[T]] = {}
            for target in targets:
                groups.setdefault(owner(target), []).append(target)
            blamed = _blame(execute, list(groups.items()), error)
            if not blamed:
                raise
            failed.update(blamed)
            targets = [t for t in targets if owner(t) not in blamed]


def _blame(execute: Callable, groups: list[tuple[Hashable, list]], error: Exception) -> dict[Hashable, Exception]:
    if len(groups) == 1:
        return {groups[0][0]: error}
    half = len(groups) // 2
    blamed: dict[Hashable, Exception] = {}
    for part in (groups[:half], groups[half:]):
        try:
            execute([target for _, members in part for target in members])
        except Exception as part_error:
            blamed |= _blame(execute, part, part_error)
    return blamed
