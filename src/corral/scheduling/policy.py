"""Pool and project policy: how each pool orders and places its jobs, and what each project may hold.

Set in the controller's config file (`--config`) or through the admin API, kept in the store,
and read into a `Policy` for each scheduling pass. A pool or project nobody configured gets
the defaults: priority order, concentrated placement, preemption on, no reservation, no quota.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, Field

from corral.core.spec import Seconds, parse_bytes
from corral.core.wire import WireModel

DEFAULT_POOL = "default"
DEFAULT_PROJECT = "default"


class Strategy(StrEnum):
    """Which of the workers that fit a task gets it."""

    CONCENTRATED = "concentrated"  # the fullest that fits: fewest workers used, big holes kept for gangs
    DISPERSED = "dispersed"  # the emptiest: load spread evenly
    ROUND_ROBIN = "round-robin"  # the next in turn


class Sequencer(StrEnum):
    """In which order a pool's pending jobs are offered room."""

    FIFO = "fifo"
    PRIORITY = "priority"  # higher priority first, then submission order
    FAIR_SHARE = "fair-share"  # the project with the smallest dominant share of the pool first (DRF)


def _amount(value: object) -> object:
    """4, "4", "0.5", or a size such as "64G" for memory."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return parse_bytes(value)
    return value


Amount = Annotated[float, BeforeValidator(_amount), Field(ge=0)]


class PoolPolicy(WireModel):
    model_config = ConfigDict(extra="forbid")

    strategy: Strategy = Strategy.CONCENTRATED
    sequencer: Sequencer = Sequencer.PRIORITY
    reservation_time: Seconds | None = Field(
        None, ge=0, description="a job waiting longer than this gets room held for it (backfill); none: never")
    max_per_job: dict[str, Amount] = Field(
        default_factory=dict, description="most a job may ask in total, per resource; more is refused at submission")
    preemption: bool = Field(True, description="higher-priority jobs may evict lower ones (priority sequencer)")


class ProjectQuota(WireModel):
    model_config = ConfigDict(extra="forbid")

    limits: dict[str, Amount] = Field(default_factory=dict, description="most the project may hold at once")


class PolicyFile(WireModel):
    """The controller's config file: pools and project quotas (the retry default and `metrics:` are read elsewhere)."""

    model_config = ConfigDict(extra="forbid")

    pools: dict[str, PoolPolicy] = Field(default_factory=dict)
    quotas: dict[str, ProjectQuota] = Field(default_factory=dict)
    # The cluster's default retry policy: validated and applied by corral.controller.retry_defaults.
    retry_policy: dict[str, Any] | None = None
    # Who may read /metrics: validated by corral.controller.settings.
    metrics: dict[str, Any] | None = None


@dataclass(frozen=True)
class Policy:
    pools: dict[str, PoolPolicy] = field(default_factory=dict)
    quotas: dict[str, dict[str, float]] = field(default_factory=dict)

    def pool(self, name: str) -> PoolPolicy:
        return self.pools.get(name) or _DEFAULT_POOL_POLICY

    def may_preempt(self, pool: str) -> bool:
        """Only a priority-ordered pool preempts: elsewhere the evicted could be offered the room first."""
        policy = self.pool(pool)
        return policy.preemption and policy.sequencer is Sequencer.PRIORITY


_DEFAULT_POOL_POLICY = PoolPolicy()


def over_pool_maximum(policy: PoolPolicy, total: dict[str, float]) -> str | None:
    """Why a job asking `total` (summed over its tasks) is refused in this pool, or None."""
    for resource, most in policy.max_per_job.items():
        asked = total.get(resource, 0.0)
        if asked > most + 1e-9:
            return f"asks {asked:g} {resource} in total; the pool allows at most {most:g} per job"
    return None
