"""/api/v1/jobs/{job}/tasks/{index}/result: a task stores its function's result; clients wait for it."""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response, status
from fastapi.responses import JSONResponse

from corral.controller.files_api import no_such_task
from corral.controller.identity import allow, principal_of
from corral.controller.params import RAW_BODY, PathId, PathIndex
from corral.controller.results import MAX_RESULT, ResultFiles
from corral.controller.services import services_of
from corral.core.roles import Action
from corral.core.states import TASK_TERMINAL, TaskState
from corral.core.wire import MAX_COUNT
from corral.store.task_views import task_at

router = APIRouter(prefix="/api/v1/jobs/{job_id}/tasks/{index}/result", tags=["functions"],
                   dependencies=[Depends(allow(Action.LOGS, "job", job_tokens=True))])

POLL = 0.1  # how often a waiting reader looks for the task's end (a written result wakes it at once)
DRAIN_LIMIT = 16 * MAX_RESULT


def _files(request: Request) -> ResultFiles:
    return services_of(request).results


async def _task(request: Request, job_id: int, index: int):
    async with services_of(request).store.read() as connection:
        row = await task_at(connection, job_id, index)
        if row is None:
            raise await no_such_task(connection, job_id, index)
    return row


@router.put("", status_code=status.HTTP_204_NO_CONTENT, openapi_extra=RAW_BODY)
async def put_result(job_id: PathId, index: PathIndex, request: Request,
                     attempt: int = Query(..., ge=0, le=MAX_COUNT)) -> None:
    """Only the task's own job (or a cluster admin) writes it, for the attempt that runs now."""
    caller = principal_of(request)
    if not caller.cluster_admin and caller.job_id != job_id:
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"only a task of job {job_id} stores its results")
    data = await _bounded_body(request)
    task = await _task(request, job_id, index)
    if task.attempt != attempt:
        raise HTTPException(status.HTTP_409_CONFLICT,
                            f"task {index} of job {job_id} runs attempt {task.attempt} now, not {attempt}")
    _files(request).write(task.id, attempt, data)


async def _bounded_body(request: Request) -> bytes:
    """The body, or 413 once it passes the limit. The rest is read and dropped (up to DRAIN_LIMIT), since
    a reply sent while the client still sends reaches it as a reset connection, not as the 413."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size <= MAX_RESULT:
            chunks.append(chunk)
        elif size > DRAIN_LIMIT:
            break
    if size > MAX_RESULT:
        raise _too_large(size)
    return b"".join(chunks)


def _too_large(size: int) -> HTTPException:
    return HTTPException(status.HTTP_413_CONTENT_TOO_LARGE,
                         f"the result ({size} bytes or more) is over the limit of {MAX_RESULT // 2**20} MiB; "
                         "write large outputs to shared storage and return their location")


@router.get("")
async def get_result(job_id: PathId, index: PathIndex, request: Request,
                     attempt: int | None = Query(None, ge=0, le=MAX_COUNT),
                     wait: float = Query(0.0, ge=0, le=60), final: bool = False) -> Response:
    """The result of the task's current attempt (or `attempt`).

    Waits up to `wait` seconds for it to exist (with `final`, also for the task to end, since a
    failed attempt may be retried). 200: the result; 202: not yet; 404: the task ended without one.
    """
    files = _files(request)
    deadline = time.monotonic() + wait
    while True:
        task = await _task(request, job_id, index)
        chosen = task.attempt if attempt is None else attempt
        data = files.read(task.id, chosen)
        ended = TaskState(task.state) in TASK_TERMINAL
        if (data is not None and (ended or not final)) or ended or time.monotonic() >= deadline:
            break
        await files.written(min(POLL, max(0.0, deadline - time.monotonic())))
    headers = {"X-Corral-Attempt": str(chosen), "X-Corral-Task-State": task.state}
    if data is not None:
        return Response(data, media_type="application/octet-stream", headers=headers)
    if ended:
        why = "; ".join(str(x) for x in (task.reason, task.exit_code is not None and f"exit code {task.exit_code}")
                        if x)
        raise HTTPException(status.HTTP_404_NOT_FOUND,
                            f"task {index} of job {job_id} ended {task.state} without a result"
                            + (f" ({why})" if why else ""), headers=headers)
    return JSONResponse({"detail": f"task {index} of job {job_id} is {task.state}; no result yet"},
                        status_code=status.HTTP_202_ACCEPTED, headers=headers)
