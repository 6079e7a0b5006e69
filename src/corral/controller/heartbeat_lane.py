"""The workers' heartbeats, the most frequent call of all, served without FastAPI's routing and dependencies.

At a thousand workers the controller answers some 500 heartbeats a second on its one event loop; FastAPI's
route matching, dependency solving and answer checking cost more of its CPU than the heartbeat's own work (in
one process, a poll's CPU through the app 2x what `answer_heartbeat` and the checks below take). `HeartbeatLane`
takes a heartbeat that passes every check the route makes, the same way, and answers it as the route would, byte
for byte; whatever fails a check goes on to the route, body and all, which answers it as ever (401, 422, 404), so
a refusal's answer has one author. It sits inside `BodyLimit` (the body it sees is whole and within the limit)
and the audit middleware, so those and the server's error answer stay as they are.
"""

from __future__ import annotations

import json
import re

from fastapi import HTTPException
from fastapi.exception_handlers import http_exception_handler
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from corral.controller.auth import is_worker_token
from corral.controller.lanes import JSON, replaying, whole_body
from corral.controller.services import services_of
from corral.controller.settings import Tokens
from corral.controller.workers_api import answer_heartbeat
from corral.core.protocol import API, HeartbeatRequest
from corral.core.wire import CLEAN_JSON, clean_json, clean_text

PATH = re.compile(re.escape(f"{API}/workers/") + r"([^/]+)/heartbeat")  # the route's, `{worker_id}` as Starlette's


class HeartbeatLane:
    """ASGI middleware: a worker's heartbeat with the right token and a valid body, answered here."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["method"] != "POST" or scope.get("root_path")
                or not (path := PATH.fullmatch(scope["path"]))):
            await self.app(scope, receive, send)
            return
        body, rest = await whole_body(receive)
        if body is None:  # the client went away, or sent more than one message: the app's own way
            await self.app(scope, replaying(rest, receive), send)
            return
        request = Request(scope, receive)
        services = services_of(request)
        checked = _checked(scope, path[1], body, services.tokens)
        if checked is None:
            await self.app(scope, replaying(rest, receive), send)
            return
        try:
            reply = await answer_heartbeat(services, *checked)
        except HTTPException as refused:
            response = await http_exception_handler(request, refused)
        else:
            response = Response(reply.model_dump_json(by_alias=True), media_type="application/json")
        await response(scope, receive, send)


def _checked(scope: Scope, worker_id: str, body: bytes, tokens: Tokens) -> tuple[str, HeartbeatRequest] | None:
    """The worker's id and the heartbeat, where the route would take them: the worker's token (`require_worker`),
    a JSON body (FastAPI reads one as JSON by its content type) valid as a HeartbeatRequest (as FastAPI validates
    it: the parsed JSON, from attributes), an id the route's `Text` takes. None where any fails."""
    authorization = content_type = None
    for name, value in scope["headers"]:
        if name == b"authorization" and authorization is None:
            authorization = value
        elif name == b"content-type" and content_type is None:
            content_type = value
    if content_type != JSON or not body or authorization is None or not authorization.isascii():
        return None
    scheme, _, token = authorization.decode("ascii").partition(" ")
    if scheme.lower() != "bearer" or not token or not is_worker_token(token, tokens):
        return None
    try:
        heartbeat = HeartbeatRequest.model_validate(json.loads(body), from_attributes=True,
                                                    context=CLEAN_JSON if clean_json(body) else None)
        return clean_text(worker_id), heartbeat
    except (ValueError, ValidationError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None
