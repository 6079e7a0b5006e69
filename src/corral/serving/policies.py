"""Eviction policies: which idle deployments to scale down so a requested one can load. Pure functions.

Each gets the target, the running set (least recently used first, swaps in flight included)
and `fits(evicting)`, which asks the placement model whether the target would fit once those
are gone (what is being unloaded counts as gone already); each returns the deployments to evict,
or None when no eviction makes room now (what is loading holds it). The scheduler, not the policy, makes sure
none of them has requests in flight.

- `FitPolicy` (the default): nothing if the target fits; else the least recently used until
  it fits. Placement knows each worker's CPUs, memory and GPU devices, so no fit rules are
  written by hand.
- `GroupPolicy`: a deployment in a `swap` group evicts the other running
  members of its group; one in an `exclusive` group also evicts every running deployment of
  other groups, except members of `persistent` groups.
- `CostMatrixPolicy`: the sets of deployments allowed to run together, each deployment with an
  eviction cost; the target runs in the allowed set containing it that costs least to reach.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from corral.core.config import CostMatrix, RouterConfig, SwapGroup

Fits = Callable[[frozenset[str]], bool]


@dataclass(frozen=True)
class FitPolicy:
    def evict_for(self, target: str, running: Sequence[str], fits: Fits) -> list[str] | None:
        if fits(frozenset()):
            return []
        chosen: list[str] = []
        for name in running:
            chosen.append(name)
            if fits(frozenset(chosen)):
                # Keep only those still needed once the last one is gone (an early small one may not be).
                for extra in list(chosen[:-1]):
                    if fits(frozenset(chosen) - {extra}):
                        chosen.remove(extra)
                return chosen
        return None  # no room now: what is loading holds it


@dataclass(frozen=True)
class Group:
    members: frozenset[str]
    swap: bool = True  # one member runs at a time
    exclusive: bool = True  # loading a member unloads other groups' members
    persistent: bool = False  # other groups never unload its members


@dataclass(frozen=True)
class GroupPolicy:
    groups: Mapping[str, Group]

    def evict_for(self, target: str, running: Sequence[str], fits: Fits) -> list[str]:
        group = self._group_of(target)
        if group is None:
            return []
        evict = []
        for name in running:
            other = self._group_of(name)
            if other is group:
                if group.swap:
                    evict.append(name)
            elif group.exclusive and not (other is not None and other.persistent):
                evict.append(name)
        return evict

    def _group_of(self, name: str) -> Group | None:
        return next((g for g in self.groups.values() if name in g.members), None)

    @classmethod
    def from_config(cls, groups: Mapping[str, SwapGroup]) -> GroupPolicy:
        return cls({name: Group(frozenset(g.members), g.swap, g.exclusive, g.persistent) for name, g in groups.items()})


@dataclass(frozen=True)
class CostMatrixPolicy:
    sets: tuple[frozenset[str], ...]
    costs: Mapping[str, float] = field(default_factory=dict)  # eviction cost; 1 when not given

    def evict_for(self, target: str, running: Sequence[str], fits: Fits) -> list[str]:
        candidates = [s for s in self.sets if target in s]
        if not candidates:
            return list(running)  # allowed with nothing else
        best = min(candidates, key=lambda s: (self._cost(n for n in running if n not in s),
                                              sum(n not in s for n in running)))
        return [n for n in running if n not in best]

    def _cost(self, names: Iterable[str]) -> float:
        return sum(self.costs.get(n, 1.0) for n in names)

    @classmethod
    def from_config(cls, matrix: CostMatrix) -> CostMatrixPolicy:
        return cls(tuple(frozenset(s) for s in matrix.sets), dict(matrix.costs))


def policy_from_config(config: RouterConfig):
    """The router config's `groups`, its `matrix`, or neither (fit by placement); the config allows one at most."""
    if config.groups is not None:
        return GroupPolicy.from_config(config.groups)
    if config.matrix is not None:
        return CostMatrixPolicy.from_config(config.matrix)
    return FitPolicy()
