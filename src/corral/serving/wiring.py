"""Serving inside the controller: the serving engine and the router, wired to the store and the job engine."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from corral.core.config import RouterConfig
from corral.engine.serving_loop import ServingEngine
from corral.metrics import REPLICA_HEALTH
from corral.serving.backends import LocalBackend
from corral.serving.policies import policy_from_config
from corral.serving.router import Router
from corral.store.store import Store

log = logging.getLogger("corral.serving")


def router_from_config(backend, config: RouterConfig, *, autoscale: bool = False) -> Router:
    return Router(backend, policy_from_config(config), max_wait=config.max_wait, swap_timeout=config.swap_timeout,
                  autoscale=autoscale)


def health_changed(deployment: str, replica_id: int, healthy: bool) -> None:
    REPLICA_HEALTH.labels(deployment, str(healthy).lower()).inc()
    log.info("deployment=%s replica=%s health check %s", deployment, replica_id, "passes" if healthy else "fails")


def start_serving(store: Store, wake_jobs: Callable[[], None],
                  config: RouterConfig) -> tuple[Router, ServingEngine, list[asyncio.Task]]:
    """The router and the serving engine, wired to each other, and their loops' tasks."""
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per proxied request or probe is noise
    serving: ServingEngine | None = None  # set below: the router's backend asks it to look again when called

    async def changed() -> None:
        assert serving is not None
        await serving.changed()

    router = router_from_config(LocalBackend(store, changed), config, autoscale=True)
    serving = ServingEngine(store, wake_jobs=wake_jobs, publish=router.publish, on_health=health_changed)
    return router, serving, [asyncio.create_task(serving.run(), name="serving"),
                             asyncio.create_task(router.run(), name="router")]
