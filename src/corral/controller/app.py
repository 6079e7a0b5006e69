"""The controller's ASGI app: the API, the engine loop beside it, and its files."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from functools import partial

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response

from corral.controller import (
    admin_api,
    audit_api,
    controllers_api,
    dashboard,
    dashboard_api,
    deployments_api,
    deployments_board,
    estimates_api,
    events_api,
    files_api,
    jobs_api,
    notify_api,
    placement_api,
    preemption_api,
    project_tokens_api,
    relay_api,
    results_api,
    retry_api,
    usage_api,
    users_api,
    what_if_api,
    workers_api,
)
from corral.controller.audit import AuditCalls, prune_audit_loop
from corral.controller.auth import require_admin
from corral.controller.body_limit import BodyLimit
from corral.controller.checkpoints import CheckpointFiles
from corral.controller.events import EventHub, prune_loop
from corral.controller.files import BundleStore, LogFiles
from corral.controller.grouped_writes import GroupedWrites
from corral.controller.heartbeat_lane import HeartbeatLane
from corral.controller.job_tokens import mint
from corral.controller.log_retention import prune_logs_loop
from corral.controller.orders import OrderReads, QuietPolls
from corral.controller.overview import summarize
from corral.controller.params import refuse_invalid
from corral.controller.registry import Registry
from corral.controller.relays import Relays
from corral.controller.results import ResultFiles
from corral.controller.samples import Samples
from corral.controller.services import Services, services_of
from corral.controller.settings import (
    ControllerSettings,
    load_tokens,
    other_holders,
    private_dir,
    write_cluster_file,
)
from corral.controller.submit_lane import SubmitLane
from corral.controller.submit_settings import SubmitSettings
from corral.controller.tickets import Tickets
from corral.controller.wakeups import on_change_elsewhere
from corral.controller.webhooks import Webhooks
from corral.core.collector import settle
from corral.core.relay import CLOSE_UNAVAILABLE
from corral.engine.estimates import Estimator
from corral.engine.loop import Engine, WorkerSignals
from corral.engine.reports import SeenMarks, ingest_group
from corral.metrics import CLUSTER, exposition
from corral.serving import proxy
from corral.serving.access import StorePeople
from corral.serving.pool import KeptPool
from corral.serving.wiring import start_serving
from corral.store.attachments import close_live
from corral.store.notify import Notifier
from corral.store.policy import apply_policy_file
from corral.store.store import Store


class Controller(FastAPI):
    """The API, with the router's proxied requests served before its middleware and routing see them."""

    async def __call__(self, scope, receive, send) -> None:
        if not await proxy.dispatch(self, scope, receive, send):
            await super().__call__(scope, receive, send)


def relays_held_here(settings: ControllerSettings) -> set[str | None]:
    """How the live channels whose client end this controller holds name it: by its reachable URL; unnamed, where
    it has none or is the store's one controller (SQLite)."""
    named = {settings.reachable_url} if settings.reachable_url else set()
    return named | ({None} if not settings.shares_data_dir or not settings.reachable_url else set())


def create_app(settings: ControllerSettings) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        private_dir(settings.data_dir)
        retry_config = settings.config.retry_policy
        store = await Store.open(settings.database_url)
        async with store.write() as connection:
            tokens = await load_tokens(settings, connection)
            await apply_policy_file(connection, settings.config, time.time())
            # Relays lived in the memory of the controller that held them: none of this one's survived its restart.
            await close_live(connection, "controller restarted", CLOSE_UNAVAILABLE, time.time(),
                             held_by=relays_held_here(settings))
        signals = WorkerSignals()
        engine = Engine(store, signals, settings.loss_timeout, settings.heartbeat_interval,
                        settings.lost_worker_retention, Estimator(settings.notify_estimate_factor))
        logs = LogFiles(settings.data_dir / "logs" / "tasks", settings.log_limit)
        events = EventHub()
        store.on_commit.append(events.ring)
        samples = Samples()
        loop_tasks = [
            asyncio.create_task(engine.run(), name="engine"),
            asyncio.create_task(prune_loop(store, settings.event_retention), name="prune-events"),
            asyncio.create_task(samples.run(store), name="samples"),
        ]
        if settings.log_retention is not None:
            loop_tasks.append(asyncio.create_task(prune_logs_loop(store, logs, settings.log_retention),
                                                  name="prune-logs"))
        if settings.audit_retention is not None:
            loop_tasks.append(asyncio.create_task(prune_audit_loop(store, settings.audit_retention),
                                                  name="prune-audit"))
        router, serving, serving_tasks = start_serving(store, engine.wake, settings.config.router)
        webhooks = Webhooks(store, app.version, settings.event_retention, settings.notify_backoff,
                            settings.notify_allow)
        loop_tasks.append(asyncio.create_task(webhooks.run(), name="webhooks"))
        registry = Registry(store, engine, settings.reachable_url or settings.url, app.version)
        loop_tasks.append(asyncio.create_task(registry.run(), name="registry"))
        app.state.services = Services(
            settings=settings, tokens=tokens, retry_config=retry_config, store=store, signals=signals, engine=engine,
            seen=SeenMarks(store, settings.loss_timeout), quiet=QuietPolls(),
            orders=OrderReads(store, partial(mint, tokens.admin)),
            submissions=GroupedWrites(store, jobs_api.write_submissions),
            reports=GroupedWrites(store, ingest_group),
            submit_settings=SubmitSettings(), logs=logs, bundles=BundleStore(settings.data_dir / "bundles"),
            checkpoints=CheckpointFiles(settings.data_dir / "checkpoints", settings.checkpoint_limit),
            results=ResultFiles(settings.data_dir / "results"), events=events, samples=samples, router=router,
            catalog_pool=KeptPool(store), serving=serving,
            relays=Relays(store, signals, settings.relay_connect_timeout), tickets=Tickets(), people=StorePeople(store),
            registry=registry)
        if not store.is_sqlite:  # several controllers may share it: tell them of our commits, hear of theirs
            notifier = Notifier(settings.database_url, registry.id, on_change_elsewhere(app.state.services))
            store.on_change = notifier.state_moved
            signals.announce = notifier.workers_ordered
            app.state.services.relays.announce = notifier.dial_awaited
            app.state.services.submit_settings.announce = notifier.settings_changed
            loop_tasks.append(asyncio.create_task(notifier.run(), name="notify"))
        write_cluster_file(settings, tokens, [settings.url, *other_holders(settings)])
        settle()  # what startup made lives on, frozen; collections less often (core.collector)
        try:
            yield
        finally:
            for loop_task in (*serving_tasks, *loop_tasks):
                loop_task.cancel()
            for loop_task in (*serving_tasks, *loop_tasks):
                with contextlib.suppress(asyncio.CancelledError):
                    await loop_task
            await app.state.services.seen.close()
            await store.close()
            # A stopped cluster leaves no address behind for clients to find and fail on; the others' remain.
            if others := other_holders(settings):
                write_cluster_file(settings, tokens, others)
            else:
                (settings.data_dir / "cluster.json").unlink(missing_ok=True)

    app = Controller(title="corral", version="0.1.0", lifespan=lifespan,
                  openapi_url="/api/v1/openapi.json", docs_url="/api/v1/docs", redoc_url=None)
    app.add_middleware(HeartbeatLane)  # innermost: sees a body BodyLimit let through, whole
    app.add_middleware(SubmitLane)  # as HeartbeatLane
    app.add_middleware(BodyLimit)
    app.add_middleware(AuditCalls)  # a row for each of people's mutating calls
    app.add_exception_handler(RequestValidationError, refuse_invalid)
    app.include_router(jobs_api.router)
    app.include_router(workers_api.router)
    app.include_router(files_api.router)
    app.include_router(admin_api.router)
    app.include_router(project_tokens_api.router)
    app.include_router(placement_api.router)
    app.include_router(what_if_api.router)
    app.include_router(preemption_api.router)
    app.include_router(events_api.router)
    app.include_router(dashboard_api.router)
    app.include_router(deployments_board.router)
    app.include_router(dashboard.router)
    app.include_router(results_api.router)
    app.include_router(retry_api.router)
    app.include_router(deployments_api.router)
    app.include_router(relay_api.router)
    app.include_router(relay_api.sockets)
    app.include_router(users_api.router)
    app.include_router(audit_api.router)
    app.include_router(usage_api.router)
    app.include_router(controllers_api.router)
    app.include_router(notify_api.router)
    app.include_router(estimates_api.router)
    app.router.routes[0:0] = proxy.routes()  # what `Controller` does not take first (wrong methods: 405)

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict:
        return {"ok": True}

    @app.get("/metrics", tags=["health"])
    async def metrics(request: Request) -> Response:
        if settings.metrics_token_required:
            require_admin(request)
        async with services_of(request).store.read() as connection:
            CLUSTER.summary = await summarize(connection, time.time())
        body, content_type = exposition()
        return Response(body, media_type=content_type)

    return app
