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
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from corral.controller.metrics import HANDLER_TARGET_ERRORS

log = logging.getLogger("corral.coordinator")

GIVE_UP_AFTER = 3  # runs in a row that fail on the same target before it is given up on


@dataclass(frozen=True)
class TargetError:
    """What went wrong with one target, and how many runs in a row it has gone wrong."""

    cause: str
    streak: int

    @property
    def first(self) -> bool:
        return self.streak == 1

    @property
    def give_up(self) -> bool:
        return self.streak >= GIVE_UP_AFTER

    def note(self, handler: str) -> str:
        """The history record's sentence."""
        if self.give_up:
            return f"{handler} failed on it {self.streak} runs in a row ({self.cause}); given up"
        return f"{handler} failed on it ({self.cause}); set aside, the others proceed"


def describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:500]


class TargetErrors:
    """Streaks of errors per handler and target, kept for the life of the controller."""

    def __init__(self) -> None:
        self._streaks: dict[str, dict[Hashable, int]] = {}

    def report(self, handler: str, failed: Mapping[Hashable, BaseException | str],
               entity: str = "job") -> dict[Hashable, TargetError]:
        """One run's failures (target id -> the exception, or a cause); a target not among them ends its streak."""
        before = self._streaks.get(handler, {})
        streaks = {key: before.get(key, 0) + 1 for key in failed}
        self._streaks[handler] = streaks
        errors = {}
        for key, error in failed.items():
            cause = error if isinstance(error, str) else describe(error)
            errors[key] = TargetError(cause, streaks[key])
            HANDLER_TARGET_ERRORS.labels(handler).inc()
            if streaks[key] == 1:
                log.error("%s=%s handler %s failed on it: %s; set aside, the others proceed", entity, key, handler,
                          cause, exc_info=error if isinstance(error, BaseException) else None)
            elif errors[key].give_up:
                log.error("%s=%s handler %s failed on it %d runs in a row: given up", entity, key, handler,
                          streaks[key])
        return errors
