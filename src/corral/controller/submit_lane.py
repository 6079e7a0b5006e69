"""A job's submission (POST /api/v1/jobs) served without FastAPI's routing, dependency solving and answer checking.

Submitted one call a job, FastAPI's part of a call (matching the route, solving its parameters and dependencies,
checking and dumping the answer) cost about as much of the controller's CPU as the submission's own work. As
`HeartbeatLane` does for heartbeats, `SubmitLane` takes a call whose form is the plain one (a JSON body in one
message that is a valid JobSpec, a bearer token, no query and no Idempotency-Key), names its caller by the route's
own dependency (`authenticate`), and runs the route's own function (`jobs_api.submit`), answering as FastAPI would,
byte for byte; its refusals (403, 400, 409...) are answered by FastAPI's handler of HTTPException, as the route's
are. Whatever else (another form, a body that fails validation, a token refused) goes on to the route, body and
all, so that a refusal of the call's form or token has one author. It sits inside `BodyLimit` (the body it sees is
whole and within the limit) and the audit middleware, which finds the call's route where routing would leave it.
"""

from __future__ import annotations

import json

from fastapi import HTTPException
from fastapi.exception_handlers import http_exception_handler
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from corral.controller.identity import authenticate
from corral.controller.jobs_api import router, submit
from corral.controller.lanes import JSON, replaying, whole_body
from corral.core.protocol import API
from corral.core.spec import JobSpec
from corral.core.wire import CLEAN_JSON, clean_json

PATH = f"{API}/jobs"
ROUTE: BaseRoute = next(route for route in router.routes if getattr(route, "endpoint", None) is submit)


class SubmitLane:
    """ASGI middleware: a submission of the plain form, with a token that names its caller, answered here."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != PATH or scope.get("root_path")
                or scope.get("query_string") or not _plain_headers(scope)):
            await self.app(scope, receive, send)
            return
        body, rest = await whole_body(receive)
        spec = _spec(body) if body else None
        if spec is None:  # the client went away, several messages, no JSON or no valid spec: the route's answer
            await self.app(scope, replaying(rest, receive), send)
            return
        request = Request(scope, receive)
        try:
            await authenticate(request)
        except HTTPException:  # a token refused: the route refuses it (naming the caller reads, writes nothing)
            await self.app(scope, replaying(rest, receive), send)
            return
        scope["route"] = ROUTE  # where routing leaves it: the audit's name of the call
        try:
            answer = await submit(spec, request, idempotency_key=None, shared_workdir=False)
        except HTTPException as refused:
            response = await http_exception_handler(request, refused)
        else:
            response = answer if isinstance(answer, Response) else Response(
                answer.model_dump_json(by_alias=True), status_code=ROUTE.status_code, media_type="application/json")
        await response(scope, receive, send)


def _plain_headers(scope: Scope) -> bool:
    """A JSON body (FastAPI reads one as JSON by its content type, the first given) and no Idempotency-Key (whose
    header's checks and replays are the route's)."""
    content_type = None
    for name, value in scope["headers"]:
        if name == b"idempotency-key":
            return False
        if name == b"content-type" and content_type is None:
            content_type = value
    return content_type == JSON


def _spec(body: bytes) -> JobSpec | None:
    """The body as FastAPI validates it for the route (the parsed JSON, from attributes); None where it fails.

    A body whose bytes hold no string to walk (`clean_json`) is validated by pydantic from its bytes, in one pass
    (JSON mode), rather than parsed by `json.loads` and validated from the objects made: half the cost. Where JSON
    mode accepts such a body it makes the spec the route would (the same values and fields set: JSON's types are
    what the objects parsed are, and a duplicate key keeps its last value either way); what it refuses (a UTF-8 BOM
    that `json.loads` skips, say) goes to the route, whose answer it then is."""
    try:
        if clean_json(body):
            return JobSpec.model_validate_json(body, context=CLEAN_JSON)
        return JobSpec.model_validate(json.loads(body), from_attributes=True)
    except (ValueError, ValidationError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None
