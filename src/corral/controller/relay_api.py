"""The relay's routes: channels into running tasks (terminal, exec, port), the workers' dial-back, tickets for
browsers, and a job's attachments.

Every WebSocket is accepted first and, when refused, closed with a CLOSE_* code of corral.core.relay and a reason
a person can read, so that a client can print why. A client's request is judged in this order:
1. the job id is a number (else CLOSE_INVALID);
2. the caller: a ticket for this job, or a token (controller.identity) that may ATTACH to it: the admin token, a
   user's who may, the job's own (else 4401, or 4403 with the reason);
3. the rest of the request is well formed: task index, port, command, flags, rows and cols (else CLOSE_INVALID);
4. the job and its task exist (else 4404);
5. a terminal is asked of an interactive job only, and the task's current attempt is RUNNING on a live worker
   (else 4409, naming what it is instead).
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, Request, WebSocket, status
from starlette.datastructures import QueryParams

from corral.controller.audit import record_channel
from corral.controller.auth import _bearer, require_worker
from corral.controller.identity import allow, identify, job_facts, principal_of
from corral.controller.params import PathId
from corral.controller.relays import Refused, close, fit, new_session
from corral.controller.services import Services, services_of
from corral.controller.tickets import TICKET_SECONDS
from corral.core import limits
from corral.core.relay import (
    CLOSE_CONFLICT,
    CLOSE_FORBIDDEN,
    CLOSE_INVALID,
    CLOSE_NOT_FOUND,
    CLOSE_UNAUTHORIZED,
    MAX_COLS,
    MAX_ROWS,
    ChannelKind,
)
from corral.core.roles import Action, decide
from corral.core.states import TaskState, WorkerState
from corral.core.views import AttachmentView, TicketView
from corral.core.wire import MAX_ID, clean_text
from corral.store.attachments import MAX_LISTED, Opening, job_attachments, job_exists, read_target

MAX_DIGITS = 12  # a number longer than this is out of every range here
FLAGS = {"0": False, "false": False, "1": True, "true": True}

router = APIRouter(prefix="/api/v1/jobs", tags=["relay"])
sockets = APIRouter(tags=["relay"])


@sockets.websocket("/api/v1/jobs/{job_id}/tasks/{index}/terminal")
async def terminal(websocket: WebSocket, job_id: str, index: str) -> None:
    """An interactive task's terminal: `?watch=1` to watch only, `rows` and `cols` for its size."""
    await _channel(websocket, "terminal", job_id, index)


@sockets.websocket("/api/v1/jobs/{job_id}/tasks/{index}/exec")
async def exec_(websocket: WebSocket, job_id: str, index: str) -> None:
    """Another process in a task's environment: `?command=ARG` once per argument, `tty`, `detach`, `rows`, `cols`."""
    await _channel(websocket, "exec", job_id, index)


@sockets.websocket("/api/v1/jobs/{job_id}/tasks/{index}/ports/{port}")
async def port(websocket: WebSocket, job_id: str, index: str, port: str) -> None:
    """One TCP connection to a port a process of the task listens on, on its worker's loopback."""
    await _channel(websocket, "port", job_id, index, port)


@sockets.websocket("/api/v1/relay/{session}")
async def dial_back(websocket: WebSocket, session: str) -> None:
    """A worker's end of a channel, for a session its heartbeat reply named (`?worker=` its id; join token)."""
    await websocket.accept()
    services = services_of(websocket)
    try:
        try:
            await require_worker(websocket)
        except HTTPException as refused:
            raise Refused(CLOSE_UNAUTHORIZED, str(refused.detail)) from None
        waiting = services.relays.claim(session, websocket.query_params.get("worker", ""))
    except Refused as refused:
        await close(websocket, refused.code, refused.reason)
        return
    waiting.joined.set_result(websocket)
    await waiting.done.wait()  # the client's route pipes the two; this one only keeps the worker's end open


@router.post("/{job_id}/tickets", response_model=TicketView,
             dependencies=[Depends(allow(Action.ATTACH, "job", job_tokens=True))])
async def issue_ticket(job_id: PathId, request: Request) -> TicketView:
    """A single-use ticket (`?ticket=`) that opens one channel into this job within 30 s: for a browser."""
    caller = principal_of(request)
    if caller.job_id is not None and caller.job_id != job_id:
        raise HTTPException(status.HTTP_403_FORBIDDEN, _not_yours(caller.job_id, job_id))
    services = services_of(request)
    async with services.store.read() as connection:
        if not await job_exists(connection, job_id):
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}")
    ticket = services.tickets.issue(job_id, _actor(caller.name, caller.job_id), time.time(), caller)
    return TicketView(ticket=ticket, expires_in=TICKET_SECONDS)


@router.get("/{job_id}/attachments", response_model=list[AttachmentView],
            dependencies=[Depends(allow(Action.READ, "job", job_tokens=True))])
async def attachments(job_id: PathId, request: Request,
                      limit: Annotated[int, Query(ge=1, le=MAX_LISTED)] = 100) -> list[AttachmentView]:
    """The channels opened into the job's tasks, newest first."""
    async with services_of(request).store.read() as connection:
        if not await job_exists(connection, job_id):
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}")
        rows = await job_attachments(connection, job_id, limit)
    return [AttachmentView.model_validate(row, from_attributes=True) for row in rows]


async def _channel(websocket: WebSocket, kind: ChannelKind, job_text: str, index_text: str,
                   port_text: str | None = None) -> None:
    await websocket.accept()
    services = services_of(websocket)
    try:
        opening = await _admit(services, websocket, kind, job_text, index_text, port_text)
    except Refused as refused:
        await record_channel(websocket, refused.code)
        await close(websocket, refused.code, refused.reason)
        return
    await record_channel(websocket, status.HTTP_101_SWITCHING_PROTOCOLS)
    await services.relays.serve(websocket, opening)


async def _admit(services: Services, websocket: WebSocket, kind: ChannelKind, job_text: str, index_text: str,
                 port_text: str | None) -> Opening:
    """The channel asked for, judged in the order of this module's docstring; Refused otherwise."""
    job_id = _id(job_text, "job id")  # 1.
    actor = await _authenticate(services, websocket, job_id)  # 2.
    index = _id(index_text, "task index", low=0)  # 3.
    detail = _detail(kind, websocket.query_params, port_text)
    async with services.store.read() as connection:  # 4.
        target = await read_target(connection, job_id, index)
        if target is None:
            found = await job_exists(connection, job_id)
            raise Refused(CLOSE_NOT_FOUND, f"job {job_id} has no task {index}" if found else f"no job {job_id}")
    if kind == "terminal" and not target.interactive:  # 5.
        raise Refused(CLOSE_CONFLICT, f"job {job_id} is a batch job: it has no terminal; "
                                      f"`corral exec {job_id} -- sh` runs a shell in it")
    if target.state != TaskState.RUNNING:
        raise Refused(CLOSE_CONFLICT, f"task {index} of job {job_id} is {target.state}, not RUNNING")
    if target.worker_state != WorkerState.ALIVE:
        raise Refused(CLOSE_CONFLICT, f"task {index} of job {job_id} is on worker {target.worker_id}, which is "
                                      f"{target.worker_state or 'gone'}")
    client = websocket.client
    address = fit(f"{client.host}:{client.port}")[:100] if client else None
    if services.settings.shares_data_dir and services.settings.reachable_url:
        detail["url"] = services.settings.reachable_url  # the worker may talk to another controller: it dials here
    return Opening(session=new_session(), target=target, kind=kind, detail=detail, actor=actor, address=address)


async def _authenticate(services: Services, websocket: WebSocket, job_id: int) -> str:
    """Who opens the channel (a user's name, or "job N"), from a ticket for this job or a bearer token."""
    ticket_key = websocket.query_params.get("ticket")
    if ticket_key is not None:
        ticket = services.tickets.redeem(ticket_key, time.time())
        if ticket is None:
            raise Refused(CLOSE_UNAUTHORIZED, f"the ticket is unknown, spent or expired: ask for another "
                                              f"(POST /api/v1/jobs/{job_id}/tickets)")
        if ticket.job_id != job_id:
            raise Refused(CLOSE_FORBIDDEN, f"the ticket was issued for job {ticket.job_id}, not job {job_id}")
        websocket.state.principal = ticket.principal  # the audit log's caller
        return ticket.actor
    try:
        caller, _ = await identify(services, _bearer(websocket), time.time())
    except HTTPException as refused:
        raise Refused(CLOSE_UNAUTHORIZED, f"{refused.detail}; or ?ticket=") from None
    websocket.state.principal = caller  # the audit log's caller
    if caller.job_id is not None and caller.job_id != job_id:
        raise Refused(CLOSE_FORBIDDEN, _not_yours(caller.job_id, job_id))
    async with services.store.read() as connection:
        project, owner = await job_facts(connection, job_id)
    refused = decide(caller, Action.ATTACH, project, owner) if project is not None else None  # none: 4404 later
    if refused:
        raise Refused(CLOSE_FORBIDDEN, refused)
    return _actor(caller.name, caller.job_id)


def _detail(kind: ChannelKind, query: QueryParams, port_text: str | None) -> dict:
    """The order's own fields for this kind of channel, from the query (and the port of the path)."""
    if kind == "port":
        return {"port": _number(port_text or "", "port", 1, 65535)}
    detail: dict = {}
    if kind == "terminal":
        detail["watch"] = _flag(query, "watch")
    else:
        detail.update(command=_command(query.getlist("command")), tty=_flag(query, "tty"),
                      detach=_flag(query, "detach"))
    for name, high in (("rows", MAX_ROWS), ("cols", MAX_COLS)):
        if query.get(name) is not None:
            detail[name] = _number(query[name], name, 1, high)
    return detail


def _command(command: list[str]) -> list[str]:
    if not command or not command[0].strip():
        raise Refused(CLOSE_INVALID, "command is empty: give the program to run (?command=ARG, once per argument)")
    try:
        for arg in command:
            clean_text(arg)
        return limits.check_command(command)
    except ValueError as error:
        raise Refused(CLOSE_INVALID, f"command: {error}") from None


def _id(text: str, what: str, low: int = 1) -> int:
    """An id of the path: a number, else CLOSE_INVALID; one no row can have is not found."""
    if not (text.isascii() and text.isdigit()):
        raise Refused(CLOSE_INVALID, f"{what} must be a number, not {text[:40]!r}")
    if len(text) > MAX_DIGITS or not low <= int(text) <= MAX_ID:
        raise Refused(CLOSE_NOT_FOUND, f"no {what.split()[0]} {text[:40]}")
    return int(text)


def _number(text: str, what: str, low: int, high: int) -> int:
    if not (text.isascii() and text.isdigit() and len(text) <= MAX_DIGITS and low <= int(text) <= high):
        raise Refused(CLOSE_INVALID, f"{what} must be a number from {low} to {high}, not {text[:40]!r}")
    return int(text)


def _flag(query: QueryParams, name: str) -> bool:
    value = query.get(name, "0")
    if value not in FLAGS:
        raise Refused(CLOSE_INVALID, f"{name} must be 0 or 1, not {value[:40]!r}")
    return FLAGS[value]


def _actor(name: str, job_id: int | None) -> str:
    return name if job_id is None else f"job {job_id}"


def _not_yours(caller: int | None, job_id: int) -> str:
    return f"the token of job {caller} reaches only its own job's tasks, not job {job_id}'s"
