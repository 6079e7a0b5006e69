"""The settings every submission is checked and completed against, kept in memory: each pool's policy (admission)
and the stored retry defaults (a project's, the cluster's). They change only through the admin API, which calls
`changed()` once its change is committed; a submission then reads them again, instead of on every call. Other
controllers sharing the store hear of it through `announce` (store.notify) and `forget()` theirs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from corral.core.config import PoolPolicy
from corral.core.retry_policy import RetryPolicy
from corral.store.policy import read_pool_policy
from corral.store.retries import CLUSTER, stored_defaults

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

MAX_KEPT = 10_000  # pools or projects kept; past it all are forgotten (projects are named by the submissions)


class SubmitSettings:
    def __init__(self) -> None:
        self._pools: dict[str, PoolPolicy] = {}
        self._retry: dict[tuple[str, str], RetryPolicy | None] = {}
        self._generation = 0  # bumped by every change: a read begun before it is not kept
        self.announce: Callable[[], None] | None = None

    def changed(self) -> None:
        """A pool's policy or a retry default was changed here (and committed): forget them all, here and on the
        other controllers."""
        self.forget()
        if self.announce is not None:
            self.announce()

    def forget(self) -> None:
        """Forget them all (another controller changed one)."""
        self._pools.clear()
        self._retry.clear()
        self._generation += 1

    async def pool_policy(self, connection: AsyncConnection, name: str) -> PoolPolicy:
        if name in self._pools:
            return self._pools[name]
        generation = self._generation
        policy = await read_pool_policy(connection, name)
        if generation == self._generation:
            self._keep(self._pools)[name] = policy
        return policy

    async def retry_layers(self, connection: AsyncConnection, project: str,
                           config_default: RetryPolicy | None) -> list[RetryPolicy | None]:
        """Project default, then the cluster's (stored, then the config file's): what a job's own policy is merged
        over; both stored ones in one read where not kept."""
        keys = [("project", project), CLUSTER]
        known = {key: self._retry[key] for key in keys if key in self._retry}
        if len(known) < len(keys):
            generation = self._generation
            stored = await stored_defaults(connection, [key for key in keys if key not in known])
            read = {key: stored.get(key) for key in keys if key not in known}
            if generation == self._generation:
                self._keep(self._retry).update(read)
            known.update(read)
        return [*(known[key] for key in keys), config_default]

    @staticmethod
    def _keep(kept: dict) -> dict:
        if len(kept) >= MAX_KEPT:
            kept.clear()
        return kept
