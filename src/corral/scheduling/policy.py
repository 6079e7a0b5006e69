"""Pool and project policy: how each pool orders and places its jobs, and what each project may hold.

Set in the controller's config file (`--config`, see corral.core.config) or through the admin API,
kept in the store, and read into a `Policy` for each scheduling pass. A pool or project nobody
configured gets the defaults: priority order, fragmentation-aware placement where the pool has GPUs
(concentrated elsewhere), preemption on, no reservation, no quota.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from corral.core.config import PoolPolicy, Sequencer

DEFAULT_POOL = "default"
DEFAULT_PROJECT = "default"


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
