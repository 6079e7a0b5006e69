"""/api/v1/events: every state change as server-sent events, resumable with Last-Event-ID."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request, status
from fastapi.responses import StreamingResponse

from corral.controller.events import follow_events
from corral.controller.identity import person, principal_of, refuse_unless, visible_projects
from corral.controller.services import services_of
from corral.core.roles import Action
from corral.core.states import JOB_STATE_HEADER
from corral.core.views import EventView
from corral.core.wire import MAX_ID, Text
from corral.metrics import EVENT_SUBSCRIBERS, EVENTS_SENT
from corral.scheduling.policy import DEFAULT_PROJECT
from corral.store.deployments import newest_named
from corral.store.events import stream_start

router = APIRouter(prefix="/api/v1", tags=["events"], dependencies=[Depends(person)])

KEEPALIVE = 15.0  # seconds of silence before a comment line keeps proxies from closing the stream
RETRY_MS = 2000  # how soon a disconnected EventSource should come back


def sse(event: EventView) -> str:
    """One event in the text/event-stream format: its id, its type, its JSON on one data line."""
    return f"id: {event.id}\nevent: {event.type}\ndata: {json.dumps(event.model_dump(mode='json'))}\n\n"


@router.get("/events", response_class=StreamingResponse, responses={200: {"content": {"text/event-stream": {}}}})
async def events(
    request: Request,
    after: int | None = Query(None, ge=0, le=MAX_ID, description="Send events with a higher id (Last-Event-ID wins)."),
    last: int | None = Query(None, ge=1, le=10_000, description="Start with the last N events."),
    job: int | None = Query(None, ge=1, le=MAX_ID, description="Only this job's events."),
    deployment: Text | None = Query(None, min_length=1, max_length=63,
                                   description="Only the events of the deployment(s) of this name and their replicas."),
    follow: bool = Query(True, description="Keep the stream open for new events; false: end once caught up."),
    last_event_id: str | None = Header(None, alias="Last-Event-ID"),
) -> StreamingResponse:
    """Without `after`, `last` or Last-Event-ID, the stream starts with the oldest event kept. The whole stream is
    a cluster admin's; others get the events of the jobs and deployments of the projects they may read, or name a
    job or a deployment of one."""
    services = services_of(request)
    start = after
    if last_event_id is not None:
        if not (last_event_id.strip().isascii() and last_event_id.strip().isdigit()):
            raise HTTPException(status.HTTP_400_BAD_REQUEST,
                                f"Last-Event-ID must be an event id (a non-negative integer), not {last_event_id!r}")
        start = int(last_event_id)
    principal = principal_of(request)
    # A named job or deployment is read whole once the caller may read its project; otherwise the stream is narrowed
    # to the projects the caller may read (None: no narrowing, a cluster admin).
    readable = None if job is not None or deployment is not None else visible_projects(principal)
    async with services.store.read() as connection:
        # Read before it is known whether the caller may: nothing of it is sent unless the checks below pass.
        opening = await stream_start(connection, last if start is None else None, job, deployment, readable)
        projects = []
        if job is not None:
            if opening.job_state is None:
                raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job}")
            projects.append(opening.job_project)
        if deployment is not None:
            named = await newest_named(connection, deployment)
            if named is None:
                raise HTTPException(status.HTTP_404_NOT_FOUND, f"no deployment named {deployment!r}")
            projects.append((named.spec or {}).get("project") or DEFAULT_PROJECT)
        for project in projects:
            refuse_unless(principal, Action.READ, project)
    if start is None:
        start = opening.after_last or 0
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    if opening.job_state is not None:  # of the start's moment: a move to an end the stream leaves out is in it
        headers[JOB_STATE_HEADER] = opening.job_state
    newest = opening.newest
    if start > newest:
        # Ids only grow: an id from the future means a different store, so replay all that is kept.
        start = 0
    return StreamingResponse(_stream(request, start, job, deployment, readable, follow), media_type="text/event-stream",
                             headers=headers)


async def _stream(request: Request, after: int, job: int | None, deployment: str | None,
                  projects: frozenset[str] | None, follow: bool) -> AsyncIterator[str]:
    services = services_of(request)
    EVENT_SUBSCRIBERS.inc()
    try:
        yield f"retry: {RETRY_MS}\n\n"
        quiet_since = time.monotonic()
        async for batch in follow_events(services.store, services.events, after, job, deployment=deployment,
                                         projects=projects, follow=follow):
            if batch:
                EVENTS_SENT.inc(len(batch))
                yield "".join(sse(event) for event in batch)
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= KEEPALIVE:
                yield ": keepalive\n\n"
                quiet_since = time.monotonic()
    finally:
        EVENT_SUBSCRIBERS.dec()
