"""What would it take, as the API returns it: a pending job's start estimate, and the changes that would start it
sooner (corral.scheduling.remedies decides them)."""

from __future__ import annotations

from typing import Any

from corral.core.views import StartEstimate
from corral.core.wire import DeferredModel


class RemedyView(DeferredModel):
    kind: str  # constraint, pool, drop-constraint, gpus, cpus, memory, priority, cancel
    change: str  # as the CLI says it: "--gpus 4 instead of 8"
    spec: dict[str, Any]  # the spec fields it sets; empty for a cancel
    text: str  # when it would start, as the START column says it: "now", "~4m"
    start_at: float | None
    workers: list[str] = []  # where it starts, when it starts now
    preempts: list[int] = []  # the jobs a pass now would preempt for it
    cancel: int | None = None  # the job a cancel remedy cancels


class WhatIfView(DeferredModel):
    job_id: int
    now: float  # when it was forecast
    baseline: StartEstimate  # as it is
    remedies: list[RemedyView]  # smallest change first
    forecasts: int  # how many forecasts it took
