"""Logs for users, and bundles (uploaded working directories) for users and workers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response, status
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from corral.controller.auth import require_worker
from corral.controller.files import MAX_BUNDLE, MAX_OFFSET, Stream
from corral.controller.identity import allow, authenticate
from corral.controller.params import RAW_BODY, PathId, PathIndex
from corral.controller.services import services_of
from corral.core import limits
from corral.core.roles import Action
from corral.core.spec import NAME, Workdir
from corral.core.spec_text import FILESYSTEM_ID
from corral.core.views import WorkdirSharing
from corral.core.wire import MAX_COUNT
from corral.core.workdir import shares
from corral.scheduling.policy import DEFAULT_POOL
from corral.store.scheduling_reads import file_systems_in_pool
from corral.store.task_views import attempt_numbers, job_replicas, task_at

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

router = APIRouter(prefix="/api/v1", tags=["files"])


@router.get("/jobs/{job_id}/tasks/{index}/logs", dependencies=[Depends(allow(Action.LOGS, "job", job_tokens=True))])
async def task_logs(job_id: PathId, index: PathIndex, request: Request, stream: Stream = Query("stdout"),
                    attempt: int | None = Query(None, ge=0, le=MAX_COUNT),
                    offset: int = Query(0, ge=0, le=MAX_OFFSET)) -> Response:
    services = services_of(request)
    async with services.store.read() as connection:
        task = await task_at(connection, job_id, index)
        if task is None:
            raise await no_such_task(connection, job_id, index)
        if attempt is not None:
            await _check_attempt(connection, task, job_id, index, attempt)
    chosen = task.attempt if attempt is None else attempt
    try:
        data, size = services.logs.read(task.id, chosen, stream, offset)
    except ValueError as error:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(error)) from None
    return Response(data, media_type="application/octet-stream", headers={
        "X-Corral-Attempt": str(chosen), "X-Corral-Task-State": task.state, "X-Corral-Log-Size": str(size)})


async def no_such_task(connection: AsyncConnection, job_id: int, index: int) -> HTTPException:
    """A 404 that says whether the job is missing or only the task, and which tasks the job has."""
    replicas = await job_replicas(connection, job_id)
    if replicas is None:
        return HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}")
    return HTTPException(status.HTTP_404_NOT_FOUND,
                         f"job {job_id} has no task {index} (its tasks are 0 to {replicas - 1})")


async def _check_attempt(connection: AsyncConnection, task, job_id: int, index: int, attempt: int) -> None:
    """A pinned attempt must be one the task has had or its current one (not placed yet, it has no row): any
    other would only read as an empty log."""
    if attempt == task.attempt:
        return
    known = await attempt_numbers(connection, task.id)
    if attempt not in known:
        has = f"its attempts are {', '.join(map(str, known))}" if known else "it has not started an attempt yet"
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"task {index} of job {job_id} has no attempt {attempt} ({has})")


@router.get("/workdir/sharing", response_model=WorkdirSharing, dependencies=[Depends(authenticate)])
async def workdir_sharing(
    request: Request,
    path: str = Query(..., max_length=limits.MAX_PATH, pattern="^/", description="the submission directory"),
    filesystem: str = Query(..., pattern=FILESYSTEM_ID, description="the submitter's file system id"),
    pool: str = Query(DEFAULT_POOL, max_length=100, pattern=f"^{NAME}$"),
) -> WorkdirSharing:
    """Whether a job from this directory needs its files uploaded: how many alive workers of the pool share it.
    Open to a job's own token, so that code in a task can submit from where it runs."""
    try:
        workdir = Workdir(path=path, filesystem=filesystem)
    except ValidationError as error:  # a path no directory has (a NUL, a lone surrogate): 422, as for any field
        raise RequestValidationError([{**e, "loc": ("query", *e["loc"])}
                                      for e in error.errors(include_url=False, include_context=False)]) from None
    async with services_of(request).store.read() as connection:
        return await sharing_in(connection, workdir, pool)


async def sharing_in(connection: AsyncConnection, workdir: Workdir, pool: str) -> WorkdirSharing:
    """How many alive workers of `pool` there are, and how many of them share `workdir`."""
    found = await file_systems_in_pool(connection, pool)
    return WorkdirSharing(alive=len(found), sharing=sum(shares(workdir, fs, shared) for fs, shared in found))


@router.head("/bundles/{digest}", dependencies=[Depends(authenticate)])
async def has_bundle(digest: str, request: Request) -> Response:
    found = _checked(request, digest).exists()
    return Response(status_code=status.HTTP_200_OK if found else status.HTTP_404_NOT_FOUND)


@router.put("/bundles/{digest}", status_code=status.HTTP_201_CREATED,
            dependencies=[Depends(allow(Action.SUBMIT, job_tokens=True))],
            openapi_extra=RAW_BODY)
async def put_bundle(digest: str, request: Request) -> dict:
    _checked(request, digest)
    data = await request.body()
    if len(data) > MAX_BUNDLE:
        raise HTTPException(status.HTTP_413_REQUEST_ENTITY_TOO_LARGE, f"bundle over {MAX_BUNDLE} bytes")
    try:
        services_of(request).bundles.put(digest, data)
    except ValueError as error:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(error)) from None
    return {"digest": digest, "size": len(data)}


@router.get("/bundles/{digest}", dependencies=[Depends(require_worker)])
async def get_bundle(digest: str, request: Request) -> Response:
    path = _checked(request, digest)
    if not path.exists():
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no bundle {digest}")
    return Response(path.read_bytes(), media_type="application/gzip")


def _checked(request: Request, digest: str):
    try:
        return services_of(request).bundles.path(digest)
    except ValueError as error:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(error)) from None
