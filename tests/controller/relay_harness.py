"""A real controller app served by uvicorn in this process, and a fake worker that registers, runs a task (by
report) and dials back for the channels its heartbeat reply names: the relay's tests speak real WebSockets."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator

import httpx
import uvicorn
from websockets.asyncio.client import ClientConnection, connect

from corral.controller.app import create_app
from corral.controller.job_tokens import mint
from corral.controller.settings import ControllerSettings
from corral.serving.fast_lane import protocol_for
from tests.waiting import wait_until

ADMIN = "admin-token"
JOIN = "join-token"
WORKER = {"name": "w", "address": "127.0.0.1", "capacity": {"cpu": 8, "memory": 2**34, "gpu": 0}}


class Live:
    """The controller's HTTP and WebSocket addresses, and its clients."""

    def __init__(self, port: int) -> None:
        self.http_url = f"http://127.0.0.1:{port}"
        self.ws_url = f"ws://127.0.0.1:{port}"

    def http(self, token: str = ADMIN) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.http_url, headers={"Authorization": f"Bearer {token}"}, timeout=10)

    def open(self, path: str, token: str | None = ADMIN) -> connect:
        headers = {"Authorization": f"Bearer {token}"} if token else None
        return connect(self.ws_url + path, additional_headers=headers, open_timeout=5, close_timeout=5)


@contextlib.asynccontextmanager
async def live_controller(data_dir, connect_timeout: float = 5.0) -> AsyncIterator[Live]:
    settings = ControllerSettings(data_dir=data_dir, admin_token=ADMIN, join_token=JOIN,
                                  relay_connect_timeout=connect_timeout, heartbeat_interval=0.5)
    app = create_app(settings)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", http=protocol_for(app)))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    await wait_until(lambda: server.started or task.done(), 10, "the controller to listen")
    try:
        yield Live(sock.getsockname()[1])
    finally:
        server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(task), 10)
        except TimeoutError:
            server.force_exit = True
            await task


class FakeWorker:
    """A worker that runs tasks only by report: enough for the controller to consider them RUNNING."""

    def __init__(self, live: Live) -> None:
        self.live = live
        self.http = live.http(JOIN)
        self.id = ""

    async def register(self) -> str:
        reply = await self.http.post("/api/v1/workers", json=WORKER)
        reply.raise_for_status()
        self.id = reply.json()["worker_id"]
        return self.id

    async def heartbeat(self, wait: float = 0.0, reports: list | None = None) -> list[dict]:
        reply = await self.http.post(f"/api/v1/workers/{self.id}/heartbeat",
                                     json={"wait": wait, "reports": reports or []})
        reply.raise_for_status()
        return reply.json()["orders"]

    async def run(self, job_id: int, deadline: float = 20.0) -> dict:
        """Take the job's first build order and report its task RUNNING; the order."""
        ends = time.monotonic() + deadline
        while time.monotonic() < ends:
            builds = [o for o in await self.heartbeat(wait=1) if o["action"] == "build" and o["job_id"] == job_id]
            if builds:
                order = builds[0]
                await self.heartbeat(reports=[_report(order, state) for state in ("BUILDING", "PREPARED", "RUNNING")])
                return order
        raise AssertionError(f"job {job_id} was not placed on {self.id} within {deadline}s")

    async def relay_order(self, deadline: float = 5.0) -> dict:
        """The next relay order its long-poll heartbeat is answered with."""
        ends = time.monotonic() + deadline
        while time.monotonic() < ends:
            relays = [o for o in await self.heartbeat(wait=max(ends - time.monotonic(), 0.1))
                      if o["action"] == "relay"]
            if relays:
                return relays[0]
        raise AssertionError(f"no relay order within {deadline}s")

    def dial(self, session: str, worker_id: str | None = None, token: str = JOIN) -> connect:
        return self.live.open(f"/api/v1/relay/{session}?worker={worker_id or self.id}", token)

    async def close(self) -> None:
        await self.http.aclose()


def _report(order: dict, state: str) -> dict:
    return {"task_id": order["task_id"], "attempt": order["attempt"], "state": state, "at": time.time()}


async def submit(live: Live, **spec) -> int:
    async with live.http() as admin:
        reply = await admin.post("/api/v1/jobs", json={"command": ["sh"], **spec})
        reply.raise_for_status()
        return reply.json()["id"]


async def closed_with(ws: ClientConnection, timeout: float = 5.0) -> tuple[int, str]:
    """The code and reason `ws` was closed with by the controller (frames before it are skipped)."""
    async with asyncio.timeout(timeout):
        with contextlib.suppress(Exception):
            while True:
                await ws.recv()
        await ws.wait_closed()
    assert ws.close_code is not None, "not closed"
    return ws.close_code, ws.close_reason or ""


def job_token(job_id: int) -> str:
    return mint(ADMIN, job_id)
