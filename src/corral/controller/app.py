"""The controller's ASGI app: the API, the engine loop beside it, and its files."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, Response

from corral.controller import files_api, jobs_api, workers_api
from corral.controller.engine import Engine, WorkerSignals
from corral.controller.files import BundleStore, LogFiles
from corral.controller.metrics import exposition
from corral.controller.settings import ControllerSettings, load_tokens, write_cluster_file
from corral.serving import api as serving_api
from corral.serving import proxy
from corral.serving.wiring import start_serving
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
        state.signals = WorkerSignals()
        state.engine = Engine(state.store, state.signals, settings.loss_timeout)
        state.logs = LogFiles(settings.data_dir / "logs" / "tasks")
        state.bundles = BundleStore(settings.data_dir / "bundles")
        loop_task = asyncio.create_task(state.engine.run(), name="engine")
        serving_tasks = start_serving(state)
        write_cluster_file(settings, state.tokens)
        try:
            yield
        finally:
            for task in (*serving_tasks, loop_task):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await state.store.close()
            # A stopped cluster leaves no address behind for clients to find and fail on.
            (settings.data_dir / "cluster.json").unlink(missing_ok=True)

    app = FastAPI(title="corral", version="0.1.0", lifespan=lifespan,
                  openapi_url="/api/v1/openapi.json", docs_url="/api/v1/docs", redoc_url=None)
    app.include_router(jobs_api.router)
    app.include_router(workers_api.router)
    app.include_router(files_api.router)
    app.include_router(serving_api.router)
    app.router.routes[0:0] = proxy.routes()  # first: the hot path should not walk the API's routes

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
