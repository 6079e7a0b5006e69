"""What would it take, as the API returns it: a pending job's estimate, and the changes that would start it sooner
(corral.scheduling.remedies decides them)."""

from __future__ import annotations

from typing import Any

from corral.core.wire import DeferredModel


class StartEstimate(DeferredModel):
    start_at: float | None  # None: not within the forecast's horizon, or never
    after_job: int | None = None  # the job whose end frees its room, or which it waits for
    never: bool = False  # nothing present could ever hold it
    reason: str | None = None  # with no start: why it waits, in a sentence


class RemedyView(DeferredModel):
    kind: str  # constraint, pool, drop-constraint, gpus, cpus, memory, priority, cancel
    change: str  # as the CLI says it: "--gpus 4 instead of 8"
    spec: dict[str, Any]  # the spec fields it sets; empty for a cancel
    start_at: float | None
    workers: list[str] = []  # where it starts, when it starts now
    preempts: list[int] = []  # the jobs a pass now would preempt for it
    cancel: int | None = None  # the job a cancel remedy cancels


class WhatIfView(DeferredModel):
    job_id: int
    now: float  # when it was forecast
    baseline: StartEstimate
    remedies: list[RemedyView]  # smallest change first
    forecasts: int  # how many forecasts it took
