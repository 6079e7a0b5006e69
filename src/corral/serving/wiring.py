"""Serving inside the controller: the serving engine and the router, wired to the store and the job engine."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable

from corral.engine.serving_loop import ServingEngine
from corral.metrics import REPLICA_HEALTH
from corral.serving.backends import LocalBackend, load_router_config
from corral.serving.policies import policy_from_config
from corral.serving.router import DEFAULT_SWAP_TIMEOUT, Router
from corral.store.store import Store

log = logging.getLogger("corral.serving")

CONFIG_ENV = "CORRAL_ROUTER_CONFIG"  # a YAML file: max_wait, swap_timeout, and `groups` or `matrix`


def router_from_config(backend, config: dict, *, autoscale: bool = False) -> Router:
    return Router(backend, policy_from_config(config), max_wait=float(config.get("max_wait", 60.0)),
                  swap_timeout=float(config.get("swap_timeout", DEFAULT_SWAP_TIMEOUT)), autoscale=autoscale)


def health_changed(deployment: str, replica_id: int, healthy: bool) -> None:
    REPLICA_HEALTH.labels(deployment, str(healthy).lower()).inc()
    log.info("deployment=%s replica=%s health check %s", deployment, replica_id, "passes" if healthy else "fails")


def start_serving(store: Store, wake_jobs: Callable[[], None]) -> tuple[Router, ServingEngine, list[asyncio.Task]]:
    """The router and the serving engine, wired to each other, and their loops' tasks."""
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per proxied request or probe is noise
    config = load_router_config(os.environ.get(CONFIG_ENV))
    serving: ServingEngine | None = None  # set below: the router's backend asks it to look again when called

    async def changed() -> None:
        assert serving is not None
        await serving.changed()

    router = router_from_config(LocalBackend(store, changed), config, autoscale=True)
    serving = ServingEngine(store, wake_jobs=wake_jobs, publish=router.publish, on_health=health_changed)
    return router, serving, [asyncio.create_task(serving.run(), name="serving"),
                             asyncio.create_task(router.run(), name="router")]
