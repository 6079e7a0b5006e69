"""/api/v1/workers: registration, the long-poll heartbeat, log uploads, and the worker list."""

from __future__ import annotations

import errno
import itertools
import time
from collections.abc import Iterable
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, status

from corral.controller.auth import require_worker
from corral.controller.files import MAX_OFFSET, Stream
from corral.controller.identity import allow
from corral.controller.params import RAW_BODY, PathId
from corral.controller.services import Services, services_of
from corral.core.protocol import HeartbeatReply, HeartbeatRequest, Order, RegisterReply, RegisterRequest
from corral.core.roles import Action
from corral.core.spec import MAX_GPU
from corral.core.views import DeviceTask, DeviceView, WorkerView
from corral.core.wire import MAX_COUNT, Text
from corral.engine.reports import (
    Heartbeat,
    Ingested,
    Refused,
    UnknownWorker,
    record_refusal,
    register_worker,
)
from corral.metrics import HEARTBEAT_SECONDS
from corral.scheduling.rooms import SHARES, gpu_share
from corral.store.changes import StaleWrite
from corral.store.workers import GpuHolder, Held, gpu_holders, held_by_worker, worker_rows
from corral.waiting import woken

DESCRIBED = ("model", "memory")  # what registration's entry of a device gives its view
MEASURED = ("memory_used", "utilization")  # what the latest reading of it gives
router = APIRouter(prefix="/api/v1/workers", tags=["workers"])


@router.post("", response_model=RegisterReply, dependencies=[Depends(require_worker)])
async def register(body: RegisterRequest, request: Request) -> RegisterReply:
    services = services_of(request)
    async with services.store.write() as connection:
        worker_id = await register_worker(connection, body, time.time())
    services.engine.wake()  # new room: pending jobs may fit now
    return RegisterReply(worker_id=worker_id, heartbeat_interval=services.settings.heartbeat_interval)


clock = time.monotonic  # when a long poll is answered by (a test moves it on)
FENCED_TRIES = 3  # a heartbeat another controller's commit fenced off is applied again, on what that one wrote


async def _ingest(services: Services, heartbeat: Heartbeat) -> Ingested:
    """Apply the heartbeat's reports, in one transaction with those of others that came meanwhile. With several
    controllers, one of theirs may commit a move of the same rows first (StaleWrite): the reports are applied again
    over what it committed; a 503 after FENCED_TRIES, which the worker resends."""
    for tries in itertools.count(1):
        try:
            return await services.reports.write(heartbeat)
        except StaleWrite as error:
            if tries == FENCED_TRIES:
                raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                                    f"the heartbeat was fenced off {tries} times by other writes ({error}); "
                                    "send it again") from None


@router.post("/{worker_id}/heartbeat", response_model=HeartbeatReply, dependencies=[Depends(require_worker)])
async def heartbeat(worker_id: Text, body: HeartbeatRequest, request: Request) -> HeartbeatReply:
    """Apply the reports, then answer with orders, waiting for some to appear until `wait` seconds after the
    heartbeat came: the time its mark or reports waited for the writer is part of the wait, not added to it. A poll
    of a worker answered with none and not rung since reads none (QuietPolls). A well-formed heartbeat with the
    right token is answered before it gets here, by `HeartbeatLane`, with the same checks and `answer_heartbeat`;
    this route answers the rest (its refusals) and documents the call."""
    return await answer_heartbeat(services_of(request), worker_id, body)


async def answer_heartbeat(services: Services, worker_id: str, body: HeartbeatRequest) -> HeartbeatReply:
    """The heartbeat's answer, or an HTTPException (409, 503): the route's work, once its request is checked."""
    answer_by = clock() + body.wait
    signal = services.signals.event(worker_id)

    def relays_after() -> float | None:
        if not services.relays.awaited_by(worker_id):
            return None
        return time.time() - services.settings.relay_connect_timeout

    holding = frozenset(body.holding)

    async def current_orders() -> list[Order]:
        """Read after the reports are committed, outside the one writer's lock (orders are derived, not written),
        with other heartbeats' reads that come meanwhile (OrderReads); none built again for what the worker holds."""
        return await services.orders.read(worker_id, relays_after(), holding)

    poll = services.quiet.begin(worker_id, signal.is_set())
    signal.clear()  # cleared before orders are read, so no order can slip between the read and the wait
    try:
        with HEARTBEAT_SECONDS.time():
            if body.only_liveness:
                await services.seen.seen(worker_id)
            else:
                ingested = await _ingest(services, Heartbeat(worker_id, body.reports, body.environments,
                                                             body.pythons, body.gpus))
                if not ingested.changes.empty:
                    services.engine.wake()
                    services.signals.notify(ingested.changes.touched_workers - ingested.reporters)
    except UnknownWorker:
        raise HTTPException(status.HTTP_409_CONFLICT,
                            f"worker {worker_id} is not registered or was declared lost; register again") from None
    except Refused as refused:
        async with services.store.write() as connection:
            await record_refusal(connection, worker_id, refused, time.time())
        raise HTTPException(status.HTTP_409_CONFLICT, {
            "message": f"heartbeat refused, nothing of it applied: {refused}",
            "refused": [{"task_id": r.task_id, "attempt": r.attempt, "state": r.state} for r in refused.refusals],
        }) from None
    orders = [] if poll.skips_read and body.only_liveness else await current_orders()
    if not orders and (left := answer_by - clock()) > 0 and await woken(signal, left):
        orders = await current_orders()
    services.quiet.answered(worker_id, poll, orders)
    return HeartbeatReply(orders=orders, heartbeat_interval=services.settings.heartbeat_interval)


@router.post("/{worker_id}/logs/{task_id}/{attempt}/{stream}", status_code=status.HTTP_204_NO_CONTENT,
             dependencies=[Depends(require_worker)], openapi_extra=RAW_BODY)
async def upload_log(worker_id: Text, task_id: PathId, attempt: Annotated[int, Path(ge=0, le=MAX_COUNT)],
                     stream: Stream, request: Request, offset: int = Query(..., ge=0, le=MAX_OFFSET)) -> None:
    try:
        services_of(request).logs.write(task_id, attempt, stream, offset, await request.body())
    except OSError as error:
        if error.errno != errno.EFBIG:
            raise
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE,
                            f"the log cannot reach offset {offset} here: {error.strerror}") from None


@router.get("", response_model=list[WorkerView], dependencies=[Depends(allow(Action.READ))])
async def list_workers(request: Request) -> list[WorkerView]:
    async with services_of(request).store.read() as connection:
        rows = await worker_rows(connection)
        held = await held_by_worker(connection)
        holders = await gpu_holders(connection)
    return [
        WorkerView(
            id=w.id, name=w.name, address=w.address, state=w.state, labels=w.labels or {},
            capacity={"cpu": w.cpu, "memory": w.memory, "gpu": w.gpu, **(w.custom or {})},
            used=_used(held.get(w.id)), running_tasks=held[w.id].n if w.id in held else 0,
            gpu_names=w.gpu_names or [], last_heartbeat=w.last_heartbeat, registered_at=w.registered_at,
            pool=w.pool, gpus=w.gpu_devices or [], devices=device_views(w.gpu, w.gpu_devices, w.gpu_readings,
                                                                     holders.get(w.id, ())),
            pythons=w.pythons or [], environments=w.environments or [], filesystem=w.filesystem,
            shared_fs=w.shared_fs or [], run_as_owners=w.run_as_owners, account=w.account,
        )
        for w in rows
    ]


def _used(held: Held | None) -> dict:
    """What the worker's tasks hold, as the worker list shows it."""
    if held is None:
        return {"cpu": 0.0, "memory": 0, "gpu": 0}
    return {"cpu": held.cpu, "memory": held.memory, "gpu": held.gpu}


def device_views(count: int, registered: list[dict] | None, readings: list[dict] | None,
                 holders: Iterable[GpuHolder]) -> list[DeviceView]:
    """Each of a worker's `count` GPUs: what registration said of it and NVML last read of its use (by index; a
    reading of a device the worker has not got is left out), and the tasks holding it, a whole-device task booking
    all of it and a share its hundredths."""
    described = {device.get("index"): device for device in registered or ()}
    measured = {reading.get("index"): reading for reading in readings or ()}
    devices = [DeviceView(index=index, **_known(described.get(index, {}), DESCRIBED),
                          **_known(measured.get(index, {}), MEASURED)) for index in range(min(count, MAX_GPU))]
    hundredths = [0] * len(devices)
    for task in holders:
        share = gpu_share(task.gpu)
        for index in task.gpu_ids:
            if 0 <= index < len(devices):
                hundredths[index] += share or SHARES
                devices[index].memory_reserved += task.gpu_memory if share else 0
                devices[index].tasks.append(DeviceTask(task_id=task.task_id, job_id=task.job_id, index=task.index,
                                                       share=(share or SHARES) / SHARES))
    for device, booked in zip(devices, hundredths, strict=True):
        device.booked = booked / SHARES
    return devices


def _known(entry: dict, keys: tuple[str, ...]) -> dict:
    return {key: entry[key] for key in keys if entry.get(key) is not None}
