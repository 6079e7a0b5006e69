"""The last hour of use and queue depth, sampled by the controller for the overview's charts.

Kept in memory: a restarted controller starts a fresh hour, which a dashboard can live with.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

from pydantic import BaseModel

from corral.controller.overview import RESOURCES, ClusterSummary, summarize
from corral.store.store import Store

log = logging.getLogger("corral.samples")

SAMPLE_EVERY = 10.0
WINDOW = 3600.0


class Sample(BaseModel):
    at: float
    used: dict[str, float]  # summed over the alive workers
    capacity: dict[str, float]
    queued_jobs: int
    queued_tasks: int


def sample_of(summary: ClusterSummary) -> Sample:
    return Sample(
        at=summary.at,
        used={k: sum(p.used[k] for p in summary.pools) for k in RESOURCES},
        capacity={k: sum(p.capacity[k] for p in summary.pools) for k in RESOURCES},
        queued_jobs=sum(q.jobs for q in summary.queue), queued_tasks=sum(q.tasks for q in summary.queue))


class Samples:
    def __init__(self, window: float = WINDOW, every: float = SAMPLE_EVERY) -> None:
        self.every = every
        self._kept: deque[Sample] = deque(maxlen=int(window // every) + 1)

    def add(self, sample: Sample) -> None:
        self._kept.append(sample)

    def recent(self) -> list[Sample]:
        return list(self._kept)

    async def run(self, store: Store) -> None:
        while True:
            try:
                async with store.read() as connection:
                    self.add(sample_of(await summarize(connection, time.time())))
            except Exception:
                log.exception("sampling the cluster failed; will try again")
            await asyncio.sleep(self.every)
