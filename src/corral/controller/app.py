"""The controller's ASGI app: the API, the engine loop beside it, and its files."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, Response

from corral.controller import admin_api, files_api, jobs_api, placement_api, preemption_api, workers_api
from corral.controller.checkpoints import CheckpointFiles
from corral.controller.engine import Engine, WorkerSignals
from corral.controller.files import BundleStore, LogFiles
from corral.controller.metrics import exposition
from corral.controller.settings import ControllerSettings, load_tokens, write_cluster_file
from corral.store.policy import apply_policy_file
from corral.store.store import Store

HOME = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>corral</title></head>
<body><h1>corral</h1><p>The controller is up. API: <a href="/api/v1/docs">/api/v1/docs</a>.</p></body></html>"""


def create_app(settings: ControllerSettings) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        state = app.state
        state.settings = settings
        state.tokens = load_tokens(settings)
        state.store = await Store.open(settings.database_url)
        if settings.policy is not None:
            async with state.store.write() as connection:
                await apply_policy_file(connection, settings.policy, time.time())
        state.signals = WorkerSignals()
        state.engine = Engine(state.store, state.signals, settings.loss_timeout)
        state.logs = LogFiles(settings.data_dir / "logs" / "tasks")
        state.bundles = BundleStore(settings.data_dir / "bundles")
        state.checkpoints = CheckpointFiles(settings.data_dir / "checkpoints", settings.checkpoint_limit)
        loop_task = asyncio.create_task(state.engine.run(), name="engine")
        write_cluster_file(settings, state.tokens)
        try:
            yield
        finally:
            loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop_task
            await state.store.close()
            # A stopped cluster leaves no address behind for clients to find and fail on.
            (settings.data_dir / "cluster.json").unlink(missing_ok=True)

    app = FastAPI(title="corral", version="0.1.0", lifespan=lifespan,
                  openapi_url="/api/v1/openapi.json", docs_url="/api/v1/docs", redoc_url=None)
    app.include_router(jobs_api.router)
    app.include_router(workers_api.router)
    app.include_router(files_api.router)
    app.include_router(admin_api.router)
    app.include_router(placement_api.router)
    app.include_router(preemption_api.router)

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict:
        return {"ok": True}

    @app.get("/metrics", tags=["health"])
    async def metrics() -> Response:
        body, content_type = exposition()
        return Response(body, media_type=content_type)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def home() -> str:
        return HOME

    return app
