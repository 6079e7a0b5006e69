"""The router's HTTP face: OpenAI-compatible /v1 routes (by the `model` field) and /serve/{deployment}/{path}.

A request is checked (key, model) before anything starts, then waits for the scheduler's
decision, then is relayed to the healthy replica with the fewest requests in flight.
Responses stream through chunk by chunk (SSE included); a client that goes away while
queued leaves the queue at once, and one that goes away mid-response closes the upstream
connection. Bodies are buffered only where routing needs them: the /v1 routes read the JSON
for its `model`; /serve streams its body through.

This is the general path, through the app. The router's server serves the common request
before it gets here, in `fast_lane`, with the same checks (`refusal`, `model_route`) and answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import NamedTuple

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from corral.metrics import ROUTER_TRAFFIC
from corral.serving.access import bearer, may_call, personal
from corral.serving.host import RouterHost
from corral.serving.router import Router, RouterError, Waiter
from corral.serving.streamed_body import StreamedBody
from corral.serving.upstream import Connection, UpstreamError

MAX_BODY = 64 * 2**20  # a /v1 body is parsed for its model; larger ones are refused
WHOLE_BODY = 64 * 2**10  # responses of a known length up to this are relayed in one piece
SERVE_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
POSITION_HEADER = "X-Corral-Queue-Position"
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te",
                        b"trailer", b"transfer-encoding", b"upgrade", b"host", b"authorization", b"content-length",
                        b"expect"})
RESPONSE_DROP = HOP_BY_HOP - {b"content-length"}


class Refusal(NamedTuple):
    """A request answered by the router itself, before any replica sees it."""

    status: int
    message: str
    code: str | None = None

    def body(self) -> dict:
        """OpenAI-shaped, so SDKs show the message."""
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "code": self.code}}


def error(status: int, message: str, code: str | None = None) -> JSONResponse:
    return JSONResponse(Refusal(status, message, code).body(), status_code=status)


def refusal(router: Router, deployment: str, authorization: str | None, admin_token: str) -> Refusal | None:
    """404 for an unknown deployment, 401 for a wrong or missing key; None when the call may go ahead."""
    facts = router.catalog.deployments.get(deployment)
    if facts is None:
        return Refusal(404, f"no deployment named {deployment!r}", "model_not_found")
    if not may_call(facts, bearer(authorization), admin_token):
        return Refusal(401, f"a valid key for {deployment} is needed (Authorization: Bearer ...)", "invalid_api_key")
    return None


def model_route(router: Router, body: bytes) -> tuple[str, dict] | Refusal:
    """The deployment serving an OpenAI request's `model`, and the parsed body."""
    try:
        payload = json.loads(body)
        model = payload["model"]
        if not isinstance(model, str):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        return Refusal(400, "the body must be a JSON object with a string 'model'")
    deployment = router.deployment_for_model(model)
    if deployment is None:
        return Refusal(404, f"the model {model!r} is not served here", "model_not_found")
    return deployment, payload


def _host(request: Request) -> RouterHost:
    return request.app.state.services


def _router(request: Request) -> Router:
    return _host(request).router


async def _denied(request: Request, deployment: str) -> Response | None:
    authorization = request.headers.get("authorization")
    found = refusal(_router(request), deployment, authorization, _host(request).tokens.admin)
    if found is not None and found.status == 401 and personal(key := bearer(authorization)):
        facts = _router(request).catalog.deployments[deployment]
        if await _host(request).people.may_read(key, facts.spec.project):
            return None
    return None if found is None else error(*found)


async def openai(request: Request) -> Response:
    """POST /v1/chat/completions, /v1/completions, /v1/embeddings: routed by the body's `model`."""
    started = time.perf_counter()
    if int(request.headers.get("content-length") or 0) > MAX_BODY:
        return error(413, f"request body over {MAX_BODY} bytes")
    body = await request.body()
    route = model_route(_router(request), body)
    if isinstance(route, Refusal):
        return error(*route)
    deployment, payload = route
    if (denied := await _denied(request, deployment)) is not None:
        return denied
    return await _forward(request, deployment, request.url.path, body,
                          early=payload.get("stream") is True, started=started)


async def models(request: Request) -> Response:
    """GET /v1/models: the models the caller's key may use."""
    router = _router(request)
    key = bearer(request.headers.get("authorization"))
    data = [{"id": model, "object": "model", "created": int(facts.since), "owned_by": name}
            for name, facts in sorted(router.catalog.deployments.items())
            if may_call(facts, key, _host(request).tokens.admin) for model in facts.spec.model_names]
    if not data and not key:
        return error(401, "a key is needed (Authorization: Bearer ...)", "invalid_api_key")
    return JSONResponse({"object": "list", "data": data})


async def serve(request: Request) -> Response:
    """/serve/{deployment}/{path}: any method, the body streamed through."""
    started = time.perf_counter()
    deployment = request.path_params["deployment"]
    if (denied := await _denied(request, deployment)) is not None:
        return denied
    first = await request.receive()
    done = not first.get("more_body", False)
    body = first.get("body", b"") if done else StreamedBody(request.receive, first.get("body", b""))
    return await _forward(request, deployment, "/" + request.path_params["path"], body, early=False, started=started)


async def queue(request: Request) -> Response:
    """GET /api/v1/router/queue: who waits for what, and where."""
    if bearer(request.headers.get("authorization")) != _host(request).tokens.admin:
        return error(401, "the admin token is needed")
    return JSONResponse({"waiting": _router(request).queue_view()})


OPENAI_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/embeddings"})


async def dispatch(app, scope, receive, send) -> bool:
    """Serve a proxied request straight from the server, ahead of the app's middleware and routing.

    True when it was one (POST to an OpenAI path, or /serve/{deployment}/{path}); anything else,
    wrong methods included, is left to the app, whose `routes()` give the same answers the slow way.
    """
    if scope["type"] != "http":
        return False
    path = scope["path"]
    if path.startswith("/serve/"):
        deployment, slash, rest = path[7:].partition("/")
        if not deployment or not slash or scope["method"] not in SERVE_METHODS:
            return False
        scope["path_params"] = {"deployment": deployment, "path": rest}
        handler = serve
    elif path in OPENAI_PATHS and scope["method"] == "POST":
        handler = openai
    else:
        return False
    scope["app"] = app
    response = await handler(Request(scope, receive))
    await response(scope, receive, send)
    return True


def routes() -> list[Route]:
    return [
        *(Route(path, openai, methods=["POST"]) for path in sorted(OPENAI_PATHS)),
        Route("/v1/models", models, methods=["GET"]),
        Route("/serve/{deployment}/{path:path}", serve, methods=list(SERVE_METHODS)),
        Route("/api/v1/router/queue", queue, methods=["GET"]),
    ]


# relaying ------------------------------------------------------------------------------------


async def _forward(request: Request, deployment: str, path: str, body: bytes | StreamedBody, *, early: bool,
                   started: float) -> Response:
    router = _router(request)
    waiter = router.submit(deployment)
    if not waiter.future.done() and early:
        position = waiter.positions.get_nowait() if not waiter.positions.empty() else 0
        return StreamingResponse(_queued_stream(request, waiter, path, body, started), media_type="text/event-stream",
                                 headers={POSITION_HEADER: str(position)})
    try:
        watch = body.watch if isinstance(body, StreamedBody) else lambda: _disconnect(request)
        if not await _wait(waiter, watch):
            router.abandon(waiter)
            return Response(status_code=499)
    except asyncio.CancelledError:
        router.abandon(waiter)
        raise
    try:
        waiter.future.result()
    except RouterError as failure:
        ROUTER_TRAFFIC.record(deployment, failure.status)
        return error(failure.status, failure.reason)
    if isinstance(body, StreamedBody):
        body = body.whole() or body
    upstream, endpoint = await _open(request, router, deployment, path, body)
    if isinstance(upstream, Response):
        return upstream
    if upstream.complete or upstream.content_length is not None and upstream.content_length <= WHOLE_BODY:
        return await _whole(router, deployment, endpoint, upstream, started)
    response = StreamingResponse(_relay(router, deployment, endpoint, upstream, started), status_code=upstream.status)
    response.raw_headers = [(k, v) for k, v in upstream.headers if k.lower() not in RESPONSE_DROP]
    return response


async def _wait(waiter: Waiter, watch: Callable[[], Awaitable[None]]) -> bool:
    """Wait for the decision; False if the client disconnected first (`watch` returns when it does)."""
    if waiter.future.done():
        return True
    watcher = asyncio.ensure_future(watch())
    try:
        await asyncio.wait([waiter.future, watcher], return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    return waiter.future.done()


async def _disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        continue


async def _open(request: Request, router: Router, deployment: str, path: str, body):
    """Open the upstream response on the least busy replica; a Response instead when that fails."""
    endpoint = router.pick(deployment)
    if endpoint is None:
        router.finished(deployment, None)
        ROUTER_TRAFFIC.record(deployment, 503)
        return error(503, f"{deployment} has no healthy replica"), None
    headers = [(k, v) for k, v in request.scope["headers"] if k.lower() not in HOP_BY_HOP]
    if request.client:
        headers.append((b"x-forwarded-for", request.client.host.encode()))
    query = request.scope.get("query_string", b"").decode("latin-1")
    target = path + (f"?{query}" if query else "")
    try:
        upstream = await router.upstream.request(endpoint.address, request.method, target, headers,
                                                 body if isinstance(body, bytes) else body.chunks(),
                                                 _stream_length(request, body))
    except (UpstreamError, OSError) as failure:
        router.finished(deployment, endpoint)
        ROUTER_TRAFFIC.record(deployment, 502)
        return error(502, f"replica {endpoint.replica_id} of {deployment} failed: {failure}"), None
    except BaseException:
        router.finished(deployment, endpoint)
        raise
    return upstream, endpoint


def _stream_length(request: Request, body) -> int | None:
    """The client's own length for a streamed body, which then goes upstream as it is (chunked when unknown)."""
    if isinstance(body, bytes) or "chunked" in request.headers.get("transfer-encoding", "").lower():
        return None
    length = request.headers.get("content-length")
    return int(length) if length and length.isdigit() else None


class Whole:
    """A small response of known length, sent in one piece: it skips the streaming machinery."""

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    async def __call__(self, scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body})


async def _whole(router: Router, deployment: str, endpoint, upstream: Connection, started: float) -> Whole:
    try:
        content = await upstream.read()
    except BaseException:
        upstream.close()
        raise
    finally:
        router.finished(deployment, endpoint)
    upstream.release()
    ROUTER_TRAFFIC.record(deployment, upstream.status, time.perf_counter() - started)
    headers = [(k, v) for k, v in upstream.headers if k.lower() not in HOP_BY_HOP]
    length = upstream.content_length if upstream.head_only and upstream.content_length is not None else len(content)
    headers.append((b"content-length", b"%d" % length))  # a HEAD answer tells the length it would have
    return Whole(upstream.status, headers, content)


async def _relay(router: Router, deployment: str, endpoint, upstream: Connection,
                 started: float) -> AsyncIterator[bytes]:
    """Pass the replica's bytes on as they come; on any end (done, error, client gone) release the replica.

    A response read to its end returns its connection to the pool; one cut short closes it, which
    is how the replica learns that the client went away.
    """
    complete = False
    try:
        async for chunk in upstream.chunks():
            yield chunk
        complete = True
    finally:
        if complete:
            upstream.release()
        else:
            upstream.close()
        router.finished(deployment, endpoint)
        ROUTER_TRAFFIC.record(deployment, upstream.status, time.perf_counter() - started)


async def _queued_stream(request: Request, waiter: Waiter, path: str, body: bytes,
                         started: float) -> AsyncIterator[bytes]:
    """A streaming request that must wait: the response starts now, with its queue position as SSE comments."""
    router = _router(request)
    deployment = waiter.req.deployment
    try:
        while not waiter.future.done():
            position = asyncio.ensure_future(waiter.positions.get())
            await asyncio.wait([waiter.future, position], return_when=asyncio.FIRST_COMPLETED)
            if position.done():
                yield f": queue position {position.result()}\n\n".encode()
            else:
                position.cancel()
    except BaseException:
        router.abandon(waiter)
        raise
    try:
        waiter.future.result()
    except RouterError as failure:
        ROUTER_TRAFFIC.record(deployment, failure.status)
        yield f"data: {json.dumps({'error': {'message': failure.reason, 'code': failure.status}})}\n\n".encode()
        return
    upstream, endpoint = await _open(request, router, deployment, path, body)
    if isinstance(upstream, Response):
        yield f"data: {json.dumps({'error': {'message': bytes(upstream.body).decode()}})}\n\n".encode()
        return
    async with contextlib.aclosing(_relay(router, deployment, endpoint, upstream, started)) as chunks:
        async for chunk in chunks:
            yield chunk
