"""The job retry policy (native session retry): its fields, its causes, and how its layers merge.

A policy as written (on a job, as a project default or as the cluster default) may leave
any field out (None): that field is inherited from the layer below. `effective_policy`
merges the layers field by field, job first, down to the built-in defaults, whose
`max_retries` is 0 so that nothing is retried unless someone opts in.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from pydantic import BeforeValidator, ConfigDict, Field, field_validator

from corral.core.retry_causes import NEVER_RETRIED, RETRIABLE_CAUSES, Backoff, FailureCause, Jitter
from corral.core.spec_text import parse_duration
from corral.core.wire import WireModel

MAX_RETRY_DELAY = 86_400.0  # 24 h: no retry waits longer, whatever a policy asks
MAX_RETRIES = 1000
Seconds = Annotated[float, BeforeValidator(parse_duration)]


class RetryPolicy(WireModel):
    """A retry policy as written; a field left out (None) is inherited from the layer below."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_retries: int | None = Field(None, ge=0, le=MAX_RETRIES, description="retries after the first try")
    retry_delay: Seconds | None = Field(None, gt=0, description="seconds before the first retry")
    backoff: Backoff | None = None
    backoff_multiplier: float | None = Field(None, ge=1.0, le=100.0)
    max_retry_delay: Seconds | None = Field(None, gt=0, description="capped at 24 h whatever is asked")
    jitter: Jitter | None = None
    jitter_ratio: float | None = Field(None, ge=0.0, le=1.0)
    eligible_causes: list[FailureCause] | None = None

    @field_validator("max_retry_delay")
    @classmethod
    def _at_most_a_day(cls, seconds: float | None) -> float | None:
        return None if seconds is None else min(seconds, MAX_RETRY_DELAY)

    @field_validator("eligible_causes")
    @classmethod
    def _retriable_only(cls, causes: list[FailureCause] | None) -> list[FailureCause] | None:
        if causes is None:
            return None
        refused = sorted(str(c) for c in causes if c in NEVER_RETRIED)
        if refused:
            allowed = ", ".join(sorted(str(c) for c in RETRIABLE_CAUSES))
            raise ValueError(f"{', '.join(refused)} is never retried; eligible causes are: {allowed}")
        return sorted(set(causes), key=list(FailureCause).index)


# The bottom layer: every field set. max_retries=0 means no job is retried unless asked.
BUILTIN_DEFAULT = RetryPolicy(
    max_retries=0, retry_delay=60.0, backoff=Backoff.FIXED, backoff_multiplier=2.0,
    max_retry_delay=3600.0, jitter=Jitter.DETERMINISTIC, jitter_ratio=0.25,
    eligible_causes=sorted(RETRIABLE_CAUSES, key=list(FailureCause).index),
)


def effective_policy(layers: Iterable[RetryPolicy | None]) -> RetryPolicy:
    """Merge policies field by field, the first layer that sets a field winning (job > project > cluster).

    The built-in defaults are the last layer, so the result has every field set.
    """
    merged: dict = {}
    for layer in (*layers, BUILTIN_DEFAULT):
        if layer is None:
            continue
        for name in RetryPolicy.model_fields:
            value = getattr(layer, name)
            if value is not None and name not in merged:
                merged[name] = value
    return RetryPolicy(**merged)
