"""How a router reaches the controller: in process (inside the controller) or over its API (`corral router`)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import yaml

from corral.core.deployment_views import CatalogView
from corral.core.serving import Catalog, DeploymentFacts, DeploymentState, Endpoint
from corral.serving.pool import Pool, read_pool
from corral.store.deployments import scale_deployment
from corral.store.store import Store


class LocalBackend:
    def __init__(self, store: Store, changed: Callable[[], Awaitable[None]]) -> None:
        self.store = store
        self.changed = changed

    async def scale(self, name: str, replicas: int, reason: str) -> None:
        async with self.store.write() as connection:
            await scale_deployment(connection, name, replicas, reason, time.time())
        await self.changed()

    async def pool(self) -> Pool:
        async with self.store.read() as connection:
            return await read_pool(connection)

    async def report_load(self, loads: dict[str, int]) -> None:
        """Nothing to send: the controller's own router is the one that autoscales, on its own load."""


class RemoteBackend:
    """For a standalone router: polls the controller's catalog (deployments, endpoints, pool) and scales through it."""

    def __init__(self, http: httpx.AsyncClient, publish: Callable[[Catalog], None]) -> None:
        self.http = http
        self.publish = publish
        self.id = uuid.uuid4().hex

    async def report_load(self, loads: dict[str, int]) -> None:
        """This router's load, for the controller's autoscaler (which sums the routers' fresh reports)."""
        response = await self.http.post("/api/v1/router/load", json={"router": self.id, "loads": loads})
        response.raise_for_status()

    async def scale(self, name: str, replicas: int, reason: str) -> None:
        response = await self.http.post(f"/api/v1/deployments/{name}/scale",
                                        json={"replicas": replicas, "reason": reason})
        response.raise_for_status()

    async def pool(self) -> Pool:
        """One poll: publishes the catalog it carries and returns the pool."""
        response = await self.http.get("/api/v1/router/catalog")
        response.raise_for_status()
        view = CatalogView.model_validate(response.json())
        self.publish(Catalog(
            {d.name: DeploymentFacts(0, d.name, d.spec, DeploymentState.READY, 0.0, d.replicas, tuple(d.key_hashes),
                                     tuple(d.project_key_hashes))
             for d in view.deployments},
            {d.name: tuple(Endpoint(i, a) for i, a in zip(d.replica_ids, d.endpoints, strict=True))
             for d in view.deployments},
            {d.name: d.start_failure for d in view.deployments if d.start_failure}))
        return Pool.from_json(view.rooms, view.holdings)


def load_router_config(path: Path | None) -> dict:
    """The router's file: `max_wait`, `swap_timeout`, and an eviction policy (`groups` or `matrix`)."""
    if path is None:
        return {}
    config = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(config, dict):
        raise ValueError(f"{path}: the router config must be a mapping")
    return config
