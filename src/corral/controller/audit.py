"""The audit log of API calls: who did what to which object, from where, when, and how it ended.

Every mutating call under /api/v1 (POST, PUT, PATCH, DELETE) and every channel opened into a task is one row,
refused calls included. What a call does is named from its route's template and method in ACTIONS (a route not
named there is recorded under its endpoint's name); the object is a template over the path's parameters, or
over the reply's fields where the call creates it (a job's id). Nothing of a request's body is kept, only what
the route itself notes as safe (`note`: a job's name and project); tokens are in headers and never read here.
Workers' and routers' own calls (registration, heartbeats, logs, results, load reports) are not people's calls.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import string
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette import status
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from corral.controller.services import services_of
from corral.core.log_limits import prune_interval
from corral.core.roles import ADMIN, Principal
from corral.core.wire import parse_id, storable
from corral.store.audit import add_audit, prune_audit
from corral.store.handler_locks import HandlerBusy
from corral.store.store import Store

log = logging.getLogger("corral.controller.audit")

API = "/api/v1/"
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CHANNEL = "WEBSOCKET"  # the method under which ACTIONS names the relay's channels
ANONYMOUS = "anonymous"  # the actor of a call refused before it said who it is
NOTE = "audit_note"  # the key of request.state under which a route leaves its safe detail
EACH = "audit_each"  # ... and, for a call that makes many objects, each one's fields and detail
WRITTEN = "audit_written"  # the outcome under which the route wrote its call's rows itself, in its own transaction
MACHINE_CALLS = ("/api/v1/workers", "/api/v1/relay/", "/api/v1/router/load",
                 "/api/v1/jobs/{job_id}/tasks/{index}/result")
WORKER_CALLS = "/api/v1/workers"  # a worker's own calls, the most frequent of all: let through unwatched
REPLY_LIMIT = 64 * 1024  # bytes of a creating call's reply read for its object's fields; past them: none


@dataclass(frozen=True)
class Named:
    """What a route does, to which object (a template over the path's parameters, or the reply's fields when
    `from_reply`), and which of those fields holds the id of the job it is about."""

    action: str
    object: str | None = None
    from_reply: bool = False
    job: str | None = None


ACTIONS: Mapping[tuple[str, str], Named] = {
    ("POST", "/api/v1/jobs"): Named("job.submit", "job {id}", from_reply=True, job="id"),
    ("POST", "/api/v1/jobs/batch"): Named("job.submit", "job {id}", job="id"),  # a row per job: note_each
    ("POST", "/api/v1/jobs/{job_id}/cancel"): Named("job.cancel", "job {job_id}", job="job_id"),
    ("POST", "/api/v1/jobs/{job_id}/tickets"): Named("job.ticket", "job {job_id}", job="job_id"),
    (CHANNEL, "/api/v1/jobs/{job_id}/tasks/{index}/terminal"): Named("job.terminal", "job {job_id} task {index}",
                                                                      job="job_id"),
    (CHANNEL, "/api/v1/jobs/{job_id}/tasks/{index}/exec"): Named("job.exec", "job {job_id} task {index}",
                                                                  job="job_id"),
    (CHANNEL, "/api/v1/jobs/{job_id}/tasks/{index}/ports/{port}"): Named(
        "job.port", "job {job_id} task {index} port {port}", job="job_id"),
    ("PUT", "/api/v1/bundles/{digest}"): Named("bundle.upload", "bundle {digest}"),
    ("PUT", "/api/v1/admin/pools/{name}"): Named("pool.set", "pool {name}"),
    ("DELETE", "/api/v1/admin/pools/{name}"): Named("pool.reset", "pool {name}"),
    ("PUT", "/api/v1/admin/projects/{name}/quota"): Named("quota.set", "project {name}"),
    ("DELETE", "/api/v1/admin/projects/{name}/quota"): Named("quota.remove", "project {name}"),
    ("POST", "/api/v1/admin/projects/{name}/tokens"): Named("project_token.create", "project {name} token {id}",
                                                            from_reply=True),
    ("DELETE", "/api/v1/admin/projects/{name}/tokens/{token_id}"): Named("project_token.revoke",
                                                                        "project {name} token {token_id}"),
    ("PUT", "/api/v1/admin/projects/{name}/notify"): Named("project_notify.set", "project {name}"),
    ("DELETE", "/api/v1/admin/projects/{name}/notify"): Named("project_notify.remove", "project {name}"),
    ("POST", "/api/v1/admin/notify/secret"): Named("notify_secret.rotate", "cluster"),  # never the reply: a secret
    ("PUT", "/api/v1/admin/retry-policy"): Named("retry_policy.set", "cluster"),
    ("DELETE", "/api/v1/admin/retry-policy"): Named("retry_policy.delete", "cluster"),
    ("PUT", "/api/v1/admin/projects/{project}/retry-policy"): Named("retry_policy.set", "project {project}"),
    ("DELETE", "/api/v1/admin/projects/{project}/retry-policy"): Named("retry_policy.delete", "project {project}"),
    ("POST", "/api/v1/deployments"): Named("deployment.create", "deployment {name}", from_reply=True),
    ("POST", "/api/v1/deployments/{name}/scale"): Named("deployment.scale", "deployment {name}"),
    ("POST", "/api/v1/deployments/{name}/keys"): Named("deployment.key", "deployment {name}"),
    ("DELETE", "/api/v1/deployments/{name}"): Named("deployment.delete", "deployment {name}"),
    # People and their tokens (the identity part's routes).
    ("POST", "/api/v1/users"): Named("user.create", "user {name}", from_reply=True),
    ("PATCH", "/api/v1/users/{name}"): Named("user.set", "user {name}"),
    ("PUT", "/api/v1/projects/{project}/members/{name}"): Named("member.set", "project {project} member {name}"),
    ("DELETE", "/api/v1/projects/{project}/members/{name}"): Named("member.remove",
                                                                  "project {project} member {name}"),
    ("POST", "/api/v1/tokens"): Named("token.create", "token {id}", from_reply=True),
    ("DELETE", "/api/v1/tokens/{token_id}"): Named("token.revoke", "token {token_id}"),
}


def audited(method: str, template: str) -> bool:
    """Whether a call to this route is a person's mutating call, recorded here."""
    return ((method in MUTATING or method == CHANNEL) and template.startswith(API)
            and not template.startswith(MACHINE_CALLS))


def note(connection: HTTPConnection, **detail: Any) -> None:
    """A route's safe detail of its call (never a secret nor a body): kept in the call's row."""
    setattr(connection.state, NOTE, {**getattr(connection.state, NOTE, {}), **detail})


def note_each(connection: HTTPConnection, objects: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """The objects a successful call made, each (its fields for the object template, its safe detail): one row
    each, as if each were made by a call of its own."""
    setattr(connection.state, EACH, objects)


def created_rows(connection: HTTPConnection, objects: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[dict]:
    """The rows of a call that creates `objects` (each: its fields for the object template, its safe detail), for
    the route to write in the very transaction that creates them: one commit for both. Once that is committed,
    `rows_written` tells the middleware, which then writes none (unless the call ends otherwise after all)."""
    named = _named(connection.scope, connection.scope["method"])
    return [] if named is None else _entries(connection, named, status.HTTP_201_CREATED, objects)


def rows_written(connection: HTTPConnection) -> None:
    setattr(connection.state, WRITTEN, status.HTTP_201_CREATED)


class AuditCalls:
    """ASGI middleware: one row per audited HTTP call, written before the reply's last byte leaves, so that a
    client that has its answer finds the row. A row that cannot be written is logged, never fails the call."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in MUTATING or not scope["path"].startswith(API) \
                or _worker_call(scope["path"]):
            await self.app(scope, receive, send)
            return
        scope.setdefault("state", {})  # shared with the request the route sees: its principal and its note
        outcome: int | None = None
        named: Named | None = None  # known once routing is done, at the reply's start; None: not recorded
        reply = bytearray()

        async def watch(message: Message) -> None:
            nonlocal outcome, named
            if message["type"] == "http.response.start":
                outcome = message["status"]
                named = _named(scope, scope["method"])
            elif message["type"] == "http.response.body" and named is not None:
                if named.from_reply and len(reply) <= REPLY_LIMIT:
                    reply.extend(message.get("body", b""))
                if not message.get("more_body", False) and scope["state"].get(WRITTEN) != outcome:
                    fields = _reply_fields(bytes(reply)) if named.from_reply and outcome < 300 else {}
                    await _record(scope, named, outcome, fields)
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception:
            if outcome is None and (named := _named(scope, scope["method"])) is not None:
                await _record(scope, named, 500, {})
            raise


def _worker_call(path: str) -> bool:
    """A worker's registration, heartbeat or upload (never recorded, see MACHINE_CALLS), known from its raw path."""
    return path == WORKER_CALLS or path.startswith(WORKER_CALLS + "/")


async def record_channel(websocket: HTTPConnection, outcome: int) -> None:
    """A channel's opening judged: 101 when it opens, else the refusal's HTTP status (4403 -> 403)."""
    if (named := _named(websocket.scope, CHANNEL)) is not None:
        await _record(websocket.scope, named, outcome - 4000 if outcome >= 4000 else outcome, {})


def _named(scope: Scope, method: str) -> Named | None:
    """What the routed call does, or None where it is not recorded (no route matched: an unknown path's 404)."""
    route = scope.get("route")
    template = getattr(route, "path", None)
    if template is None or not audited(method, template):
        return None
    return ACTIONS.get((method, template)) or Named(getattr(route, "name", "unknown"))


async def _record(scope: Scope, named: Named, outcome: int, reply_fields: Mapping[str, Any]) -> None:
    try:
        connection = HTTPConnection(scope)
        each = getattr(connection.state, EACH, None) if outcome < 300 else None
        entries = _entries(connection, named, outcome, each or [(reply_fields, getattr(connection.state, NOTE, {}))])
        async with services_of(connection).store.write() as store:
            await add_audit(store, entries)
    except Exception:
        log.exception("could not write the audit row of %s", scope.get("path"))


def _entries(connection: HTTPConnection, named: Named, outcome: int,
             objects: list[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> list[dict]:
    """The call's rows, one per object: (its fields, from the reply or the route, its safe detail)."""
    path_fields = {k: str(v)[:64] for k, v in connection.scope.get("path_params", {}).items()}
    principal = _principal(connection, outcome)
    client = connection.scope.get("client")
    at = time.time()
    return [dict(
        at=at, actor=principal.name[:64] if principal else ANONYMOUS,
        role=principal.role if principal else None, action=named.action,
        object=_object(named, fields := {**made, **path_fields}),
        job_id=parse_id(str(fields.get(named.job, ""))) if named.job else None,
        address=client[0][:100] if client else None, outcome=outcome, detail=dict(detail))
        for made, detail in objects]


def _principal(connection: HTTPConnection, outcome: int) -> Principal | None:
    """Who called: the principal authentication set, the admin where none is set yet, no one for a 401."""
    principal = getattr(connection.state, "principal", None)
    if principal is None and outcome == 401:
        return None
    return principal or Principal(name=ADMIN, cluster_admin=True)


def _object(named: Named, fields: Mapping[str, Any]) -> str | None:
    if named.object is None:
        return None
    if any(name not in fields for name in _wanted(named.object)):
        return None  # a refused creation: nothing was created to name
    return storable(named.object.format_map(fields))[:200]


@functools.cache
def _wanted(template: str) -> tuple[str, ...]:
    """The fields an object template names, parsed once a template (ACTIONS's are few), not for every row."""
    return tuple(name for _, name, _, _ in string.Formatter().parse(template) if name)


def _reply_fields(reply: bytes) -> dict[str, Any]:
    """The top-level scalars of a creating call's JSON reply (ids and names), never its secrets: they are only
    read here to name the object, through the fields ACTIONS's templates use."""
    try:
        body = json.loads(reply)
    except ValueError:
        return {}
    return {k: v for k, v in body.items() if isinstance(v, int | str)} if isinstance(body, dict) else {}


async def prune_audit_loop(store: Store, retention: float) -> None:
    """Delete rows older than the retention, now and then."""
    while True:
        try:
            async with store.write("PruneAudit") as connection:
                if pruned := await prune_audit(connection, time.time() - retention):
                    log.info("pruned %d audit rows older than %.0fs", pruned, retention)
        except HandlerBusy:
            pass  # another controller prunes now
        except Exception:
            log.exception("pruning the audit log failed; will try again")
        await asyncio.sleep(prune_interval(retention))
