"""/api/v1/workers/{worker}/tasks/{task}: a preempted attempt's acknowledgement and its checkpoint.

Both carry the epoch of the preemption order; one from another epoch, attempt or worker gets
409 and changes nothing. A checkpoint over the size limit gets 413.
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends, HTTPException, Query, Request, status
from fastapi.responses import FileResponse

from corral.controller.auth import require_worker
from corral.controller.checkpoints import TooLarge
from corral.controller.params import RAW_BODY, PathId
from corral.controller.services import services_of
from corral.core.protocol import PreemptedAck
from corral.core.wire import MAX_COUNT, Text
from corral.engine.preemption import NoSuchTask, NotCurrent, acknowledge, check_checkpoint, record_checkpoint
from corral.store.task_views import task_checkpoint

router = APIRouter(prefix="/api/v1/workers/{worker_id}/tasks/{task_id}", tags=["workers"],
                   dependencies=[Depends(require_worker)])


def _refusal(error: Exception) -> HTTPException:
    code = status.HTTP_404_NOT_FOUND if isinstance(error, NoSuchTask) else status.HTTP_409_CONFLICT
    return HTTPException(code, str(error))


@router.post("/preempted")
async def preempted(worker_id: Text, task_id: PathId, body: PreemptedAck, request: Request) -> dict:
    """The attempt's processes are gone: it ends PREEMPTED (a gang waits for its drain to complete)."""
    services = services_of(request)
    try:
        async with services.store.write() as connection:
            changes = await acknowledge(connection, worker_id, task_id, attempt=body.attempt, epoch=body.epoch,
                                        exit_code=body.exit_code, reason=body.reason, now=time.time())
    except (NoSuchTask, NotCurrent) as error:
        raise _refusal(error) from None
    services.engine.wake()
    services.signals.notify(changes.touched_workers - {worker_id})
    return {"task_id": task_id, "attempt": body.attempt, "epoch": body.epoch}


@router.post("/checkpoint", status_code=status.HTTP_201_CREATED, openapi_extra=RAW_BODY)
async def save_checkpoint(worker_id: Text, task_id: PathId, request: Request,
                          attempt: int = Query(..., ge=0, le=MAX_COUNT),
                          epoch: int = Query(..., ge=1, le=MAX_COUNT)) -> dict:
    """Opaque bytes from a PREEMPTING attempt; the task's next attempt finds them at CORRAL_CHECKPOINT_PATH."""
    services = services_of(request)
    files = services.checkpoints
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > files.limit:
        raise HTTPException(status.HTTP_413_REQUEST_ENTITY_TOO_LARGE, files.too_large(int(declared)))
    try:
        async with services.store.read() as connection:
            await check_checkpoint(connection, worker_id, task_id, attempt=attempt, epoch=epoch)
        staging, size = await files.receive(task_id, request.stream())
    except (NoSuchTask, NotCurrent) as error:
        raise _refusal(error) from None
    except TooLarge as error:
        raise HTTPException(status.HTTP_413_REQUEST_ENTITY_TOO_LARGE, str(error)) from None
    try:
        async with services.store.write() as connection:
            await record_checkpoint(connection, worker_id, task_id, attempt=attempt, epoch=epoch, size=size,
                                    now=time.time())
            files.commit(staging, task_id)
    except (NoSuchTask, NotCurrent) as error:
        raise _refusal(error) from None
    finally:
        staging.unlink(missing_ok=True)
    return {"task_id": task_id, "attempt": attempt, "epoch": epoch, "size": size}


@router.get("/checkpoint")
async def get_checkpoint(worker_id: Text, task_id: PathId, request: Request) -> FileResponse:
    """The task's newest checkpoint, for the worker that runs its current attempt."""
    services = services_of(request)
    async with services.store.read() as connection:
        row = await task_checkpoint(connection, task_id)
    if row is None or row.worker_id != worker_id:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"task {task_id} is not on worker {worker_id}")
    path = services.checkpoints.path(task_id)
    if row.checkpoint_epoch is None or not path.exists():
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"task {task_id} has no checkpoint")
    return FileResponse(path, media_type="application/octet-stream")
