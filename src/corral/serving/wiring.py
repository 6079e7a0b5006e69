"""Serving inside the controller: the serving engine and the router, wired to the store and the job engine."""

from __future__ import annotations

import asyncio
import logging

from corral.core.config import RouterConfig
from corral.engine.serving_loop import ServingEngine
from corral.metrics import REPLICA_HEALTH
from corral.serving.backends import LocalBackend
from corral.serving.policies import policy_from_config
from corral.serving.router import Router

log = logging.getLogger("corral.serving")


def router_from_config(backend, config: RouterConfig, *, autoscale: bool = False) -> Router:
    return Router(backend, policy_from_config(config), max_wait=config.max_wait, swap_timeout=config.swap_timeout,
                  autoscale=autoscale)


def health_changed(deployment: str, replica_id: int, healthy: bool) -> None:
    REPLICA_HEALTH.labels(deployment, str(healthy).lower()).inc()
    log.info("deployment=%s replica=%s health check %s", deployment, replica_id, "passes" if healthy else "fails")


def start_serving(state, config: RouterConfig) -> list[asyncio.Task]:
    """Sets `state.router` and `state.serving`; returns their loops' tasks."""
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per proxied request or probe is noise
    state.router = router_from_config(LocalBackend(state.store, lambda: state.serving.changed()), config,
                                      autoscale=True)
    state.serving = ServingEngine(state.store, wake_jobs=state.engine.wake, publish=state.router.publish,
                                  on_health=health_changed)
    return [asyncio.create_task(state.serving.run(), name="serving"),
            asyncio.create_task(state.router.run(), name="router")]
