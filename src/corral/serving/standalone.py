"""`corral router`: the router alone, for scaling out; it learns deployments from the controller's API."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from corral.client.aio import AsyncClient
from corral.core.config import RouterConfig
from corral.serving import proxy
from corral.serving.access import reads
from corral.serving.backends import RemoteBackend
from corral.serving.fast_lane import protocol_for
from corral.serving.host import RouterServices, StandaloneTokens
from corral.serving.wiring import router_from_config


class RouterApp(Starlette):
    """The proxied requests go straight to the router's handlers, ahead of routing."""

    async def __call__(self, scope, receive, send) -> None:
        if not await proxy.dispatch(self, scope, receive, send):
            await super().__call__(scope, receive, send)


class RemotePeople:
    """A standalone router's judge of personal tokens: the controller's store, asked on each request."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def may_read(self, token: str, project: str) -> bool:
        answer = await self.client.request("GET", "/api/v1/whoami", ok=(401, 403),
                                           headers={"Authorization": f"Bearer {token}"})
        return answer.status_code == 200 and reads(answer.json(), project)


def create_router_app(controller_urls: str, token: str, config: RouterConfig) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with AsyncClient(controller_urls, token) as client:
            holder: dict = {}
            router = router_from_config(RemoteBackend(client, lambda catalog: holder["router"].publish(catalog)),
                                        config)
            holder["router"] = router
            app.state.services = RouterServices(router, StandaloneTokens(admin=token), RemotePeople(client))
            task = asyncio.create_task(router.run(), name="router")
            gc.freeze()  # what startup made lives on: collections skip it, which the request path feels
            try:
                yield
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def healthz(request) -> JSONResponse:
        return JSONResponse({"ok": True})

    return RouterApp(routes=[*proxy.routes(), Route("/healthz", healthz)], lifespan=lifespan)


def run_router(controller_urls: str, token: str, host: str, port: int, config: RouterConfig) -> None:
    app = create_router_app(controller_urls, token, config)
    uvicorn.run(app, host=host, port=port, log_level="warning", http=protocol_for(app))
