"""`corral router`: the router alone, for scaling out; it learns deployments from the controller's API."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from corral.serving import proxy
from corral.serving.backends import RemoteBackend, load_router_config
from corral.serving.wiring import router_from_config


def create_router_app(controller_url: str, token: str, config: dict) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with httpx.AsyncClient(base_url=controller_url, headers={"Authorization": f"Bearer {token}"},
                                     timeout=30) as http:
            holder: dict = {}
            router = router_from_config(RemoteBackend(http, lambda catalog: holder["router"].publish(catalog)), config)
            holder["router"] = router
            app.state.router = router
            app.state.tokens = SimpleNamespace(admin=token)
            task = asyncio.create_task(router.run(), name="router")
            try:
                yield
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def healthz(request) -> JSONResponse:
        return JSONResponse({"ok": True})

    return Starlette(routes=[*proxy.routes(), Route("/healthz", healthz)], lifespan=lifespan)


def run_router(controller_url: str, token: str, host: str, port: int, config_path: Path | None) -> None:
    app = create_router_app(controller_url, token, load_router_config(config_path))
    uvicorn.run(app, host=host, port=port, log_level="warning")
