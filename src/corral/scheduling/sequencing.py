"""The order in which a pool's pending units are offered room: FIFO, priority, or fair share.

Fair share is dominant resource fairness (DRF) over what each project holds now in the
pool: the next unit comes from the project whose largest share of any resource is the
smallest, and each placement raises its project's share before the next choice.
"""

from __future__ import annotations

import heapq
from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Protocol

from corral.core.config import Sequencer


class Queued(Protocol):
    priority: int
    project: str


class Queue:
    """Hands out units one at a time; `charge` tells it what a placed unit took."""

    def __init__(self, units: Sequence, sequencer: Sequencer,
                 usage: Mapping[str, Mapping[str, float]] | None = None,
                 capacity: Mapping[str, float] | None = None) -> None:
        self.sequencer = sequencer
        self.fair = sequencer is Sequencer.FAIR_SHARE  # asked at each charge (reading the enum's member is slow)
        # The units in the order they come, where that order is fixed ahead (not under fair share, where each
        # placement moves its project's turn): the caller may take several off its head at once.
        self.plain: deque | None = None
        if sequencer is Sequencer.FAIR_SHARE:
            self._fair = _FairShare(units, usage or {}, capacity or {})
        else:
            self.plain = deque(units if sequencer is Sequencer.FIFO else _by_priority(units))

    def next(self):
        if self.plain is None:
            return self._fair.next()
        return self.plain.popleft() if self.plain else None

    def charge(self, unit) -> None:
        """The unit was placed: under fair share, its project's share grows by what it took."""
        if self.fair:
            self._fair.charge(unit.project, unit.request.amounts(len(unit.task_ids)))


def _by_priority(units: Sequence) -> list:
    """The highest priority first, equals in the order given (a reversed sort keeps equals in order)."""
    return sorted(units, key=attrgetter("priority"), reverse=True)


def dominant_share(usage: Mapping[str, float], capacity: Mapping[str, float]) -> float:
    return max((usage.get(r, 0.0) / total for r, total in capacity.items() if total > 0), default=0.0)


class _FairShare:
    def __init__(self, units: Sequence, usage: Mapping[str, Mapping[str, float]],
                 capacity: Mapping[str, float]) -> None:
        self.capacity = capacity
        self.usage: dict[str, dict[str, float]] = defaultdict(dict, {p: dict(u) for p, u in usage.items()})
        self.queues: dict[str, deque] = defaultdict(deque)
        first_seen: dict[str, int] = {}
        for position, unit in enumerate(_by_priority(units)):
            self.queues[unit.project].append(unit)
            first_seen.setdefault(unit.project, position)
        self.heap = [(self._share(p), first_seen[p], p) for p in self.queues]
        heapq.heapify(self.heap)
        self.current: tuple[int, str] | None = None

    def _share(self, project: str) -> float:
        return dominant_share(self.usage[project], self.capacity)

    def next(self):
        self._requeue()
        if not self.heap:
            return None
        _, order, project = heapq.heappop(self.heap)
        self.current = (order, project)
        return self.queues[project].popleft()

    def charge(self, project: str, amounts: Mapping[str, float]) -> None:
        usage = self.usage[project]
        for resource, amount in amounts.items():
            usage[resource] = usage.get(resource, 0.0) + amount

    def _requeue(self) -> None:
        """The project just served goes back with its share as it is now."""
        if self.current is None:
            return
        order, project = self.current
        self.current = None
        if self.queues[project]:
            heapq.heappush(self.heap, (self._share(project), order, project))
