"""Bearer tokens: the admin token for users, the join token (or the admin one) for workers."""

from __future__ import annotations

import hmac

from fastapi import HTTPException, Request, status

from corral.controller.services import services_of
from corral.controller.settings import Tokens


def _bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing bearer token (Authorization: Bearer ...)")
    return token


def require_admin(request: Request) -> None:
    if not hmac.compare_digest(_bearer(request), services_of(request).tokens.admin):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "wrong token")


async def require_worker(request: Request) -> None:
    """A worker's call carries the join token (or the admin one). A coroutine, though it awaits nothing: FastAPI
    runs a plain function dependency in its thread pool, a hop to a thread and back on every heartbeat (about
    0.1 ms of CPU each, and a wait for a core on a busy machine) for two string comparisons."""
    token = _bearer(request)
    if not is_worker_token(token, services_of(request).tokens):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "wrong join token")


def is_worker_token(token: str, tokens: Tokens) -> bool:
    """Whether a worker's call may go ahead with `token`: the join token or the admin one."""
    return hmac.compare_digest(token, tokens.join) or hmac.compare_digest(token, tokens.admin)
