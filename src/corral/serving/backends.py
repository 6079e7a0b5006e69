"""How a router reaches the controller: in process (inside the controller) or over its API (`corral router`)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from corral.client.aio import AsyncClient
from corral.core.serving import Catalog, DeploymentFacts, DeploymentState, Endpoint
from corral.serving.pool import KeptPool, Pool, read_pool
from corral.store.deployments import any_shown, scale_deployment
from corral.store.store import Store

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection


class LocalBackend:
    def __init__(self, store: Store, changed: Callable[[], Awaitable[None]]) -> None:
        self.store = store
        self.changed = changed
        self.kept_pool = KeptPool(store, _pool_if_shown)

    async def scale(self, name: str, replicas: int, reason: str) -> None:
        async with self.store.write() as connection:
            await scale_deployment(connection, name, replicas, reason, time.time())
        await self.changed()

    async def pool(self) -> Pool:
        """Asked every second, read only after a commit that may have moved state (`KeptPool`)."""
        return await self.kept_pool()

    async def report_load(self, loads: dict[str, int]) -> None:
        """Nothing to send: the controller's own router is the one that autoscales, on its own load."""


async def _pool_if_shown(connection: AsyncConnection) -> Pool:
    """With no deployment the pool is empty, and the cluster (every worker's room and every task holding some: a
    tenth of the controller's CPU at a thousand busy workers) is not read for it."""
    return await read_pool(connection) if await any_shown(connection) else Pool()


class RemoteBackend:
    """For a standalone router: polls the controller's catalog (deployments, endpoints, pool) and scales through it."""

    def __init__(self, client: AsyncClient, publish: Callable[[Catalog], None]) -> None:
        self.client = client
        self.publish = publish
        self.id = uuid.uuid4().hex

    async def report_load(self, loads: dict[str, int]) -> None:
        """This router's load, for the controller's autoscaler (which sums the routers' fresh reports)."""
        await self.client.report_router_load(self.id, loads)

    async def scale(self, name: str, replicas: int, reason: str) -> None:
        await self.client.scale_deployment(name, replicas, reason)

    async def pool(self) -> Pool:
        """One poll: publishes the catalog it carries and returns the pool."""
        view = await self.client.router_catalog()
        self.publish(Catalog(
            {d.name: DeploymentFacts(0, d.name, d.spec, DeploymentState.READY, 0.0, d.replicas, tuple(d.key_hashes),
                                     tuple(d.project_key_hashes))
             for d in view.deployments},
            {d.name: tuple(Endpoint(i, a) for i, a in zip(d.replica_ids, d.endpoints, strict=True))
             for d in view.deployments},
            {d.name: d.start_failure for d in view.deployments if d.start_failure}))
        return Pool.from_json(view.rooms, view.holdings)

