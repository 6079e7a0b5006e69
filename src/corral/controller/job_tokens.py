"""Who is calling: a user with the admin token, or a task with the token of its own job.

A task gets a job-scoped token in `CORRAL_TOKEN`, never the admin one. It is derived from the
admin token (an HMAC of the job id), so the controller checks it without storing it. With it,
a task may read, cancel and submit within its job's launch tree only: its own job and the jobs
launched from it; what it submits records the job as `launched_by`.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass

from fastapi import HTTPException, Request, status

from corral.controller.auth import _bearer
from corral.controller.services import services_of
from corral.core.wire import parse_id
from corral.store.launches import launched_within

_FORM = re.compile(r"cj_([0-9]+)_([0-9a-f]{40})")


@dataclass(frozen=True)
class Caller:
    """The admin (job_id None), or a task of job `job_id`."""

    job_id: int | None = None

    @property
    def admin(self) -> bool:
        return self.job_id is None


def mint(admin_token: str, job_id: int) -> str:
    digest = hmac.new(admin_token.encode(), f"job:{job_id}".encode(), hashlib.sha256).hexdigest()[:40]
    return f"cj_{job_id}_{digest}"


def identify(request: Request) -> Caller:
    token = _bearer(request)
    admin = services_of(request).tokens.admin
    if hmac.compare_digest(token, admin):
        return Caller()
    match = _FORM.fullmatch(token)
    if match and hmac.compare_digest(token, mint(admin, int(match.group(1)))):
        return Caller(int(match.group(1)))
    raise HTTPException(status.HTTP_401_UNAUTHORIZED, "wrong token")


async def authorize(request: Request) -> Caller:
    """The dependency of user routes: who calls, and for routes about one job, whether they may."""
    caller = identify(request)
    request.state.caller = caller
    job_id = parse_id(str(request.path_params.get("job_id", "")))
    if caller.admin or job_id is None:
        return caller  # no id the store can hold: the route answers 404
    async with services_of(request).store.read() as connection:
        within = await launched_within(connection, job_id, caller.job_id)
    if within is False:
        raise HTTPException(status.HTTP_403_FORBIDDEN, out_of_reach(caller.job_id, job_id))
    return caller  # a missing job falls through to the route's 404


def out_of_reach(caller: int, job_id: int | str) -> str:
    return f"the token of job {caller} reaches only that job and the jobs launched from it, not job {job_id}"
