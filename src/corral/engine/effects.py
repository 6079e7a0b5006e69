"""What a handler asks of the world beyond its targets' declared moves, as typed data.

A handler's `execute` returns effects in its Decision; the coordinator hands each one to the applier
registered for its type (corral.engine.coordinator), never to code that knows which handler asked.
`moves` declares the states an effect moves an entity to on the handler's behalf, so the tables can
be checked against what handlers really do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from corral.core.states import JobState
from corral.scheduling.placement import RunningTask


class Effect:
    """The base of every effect: frozen dataclasses, each of its own fields. A plain class keeping nothing (no fields,
    no `__dict__`), so that an effect made in bulk can keep its fields in slots and be made by a maker
    (core.frozen.maker): a frozen base's `__setattr__` would be the maker's too."""

    __slots__ = ()
    moves: ClassVar[Mapping[str, frozenset[str]]] = {}


@dataclass(frozen=True, slots=True)  # slots: one per placed task a pass (made by core.frozen.maker)
class Place(Effect):
    """A task placed: the worker and GPUs its move to ASSIGNED reserves, and its new attempt."""

    job_id: int
    task_id: int
    worker_id: str
    gpu_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Preempt(Effect):
    """Running work stopped to make room for a waiting job: a gang drains whole, a task is preempted alone."""

    victim: RunningTask


@dataclass(frozen=True)
class Doom(Effect):
    """A job that can never run (a dependency ended unsuccessfully): it terminates, bound for FAILED."""

    moves: ClassVar[Mapping[str, frozenset[str]]] = {"job": frozenset({JobState.TERMINATING})}

    job_id: int
    cause: str


def effect_moves(effects) -> dict[str, frozenset[str]]:
    """entity -> the states the given effect types move it to."""
    found: dict[str, frozenset[str]] = {}
    for effect in effects:
        for entity, states in effect.moves.items():
            found[entity] = found.get(entity, frozenset()) | states
    return found
