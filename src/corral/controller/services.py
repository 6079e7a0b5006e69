"""The controller's services, built once when it starts and reached by every endpoint through `services`.

One typed object instead of attributes set on `app.state`: a misspelt service fails in the reading
of the code (and in a type checker), not on the first request that reaches it.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from corral.controller.checkpoints import CheckpointFiles
from corral.controller.events import EventHub
from corral.controller.files import BundleStore, LogFiles
from corral.controller.grouped_writes import GroupedWrites
from corral.controller.orders import OrderReads, QuietPolls
from corral.controller.registry import Registry
from corral.controller.relays import Relays
from corral.controller.results import ResultFiles
from corral.controller.samples import Samples
from corral.controller.settings import ControllerSettings, Tokens
from corral.controller.submit_settings import SubmitSettings
from corral.controller.tickets import Tickets
from corral.core.retry_policy import RetryPolicy
from corral.engine.loop import Engine, WorkerSignals
from corral.engine.reports import Heartbeat, SeenMarks
from corral.engine.serving_loop import ServingEngine
from corral.serving.access import StorePeople
from corral.serving.pool import KeptPool
from corral.serving.router import Router
from corral.store.store import Store


@dataclass(frozen=True)
class Services:
    settings: ControllerSettings
    tokens: Tokens
    retry_config: RetryPolicy | None  # the config file's default retry policy, under the stored ones
    store: Store
    signals: WorkerSignals  # wakes a worker's waiting heartbeat when it has new orders
    seen: SeenMarks  # the heartbeats that carry nothing else, marked together
    orders: OrderReads  # the heartbeats' reads of their workers' orders, read together
    quiet: QuietPolls  # the workers answered with no orders and not rung since: their polls skip the read
    submissions: GroupedWrites  # the jobs submitted by concurrent calls, written and committed together
    reports: GroupedWrites[Heartbeat]  # the heartbeats with reports that come while one group is written: the next
    submit_settings: SubmitSettings  # pool policies and retry defaults, kept until the admin API changes them
    engine: Engine
    logs: LogFiles
    bundles: BundleStore
    checkpoints: CheckpointFiles
    results: ResultFiles
    events: EventHub
    samples: Samples
    router: Router
    catalog_pool: KeptPool  # the pool the standalone routers' catalog carries, read again once state moved
    serving: ServingEngine
    relays: Relays  # channels into tasks waiting for their workers to dial back
    tickets: Tickets  # unspent single-use tickets of browsers' channels
    people: StorePeople  # the router's judge of personal tokens
    registry: Registry  # this controller's row among the store's controllers


def services_of(request: Request) -> Services:
    """The services of the app that serves `request` (set by the app's lifespan before any request)."""
    return request.app.state.services
