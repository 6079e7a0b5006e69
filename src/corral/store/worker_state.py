"""Workers' own rows as the engine changes them: registration, heartbeats, loss, and forgetting the lost."""

from __future__ import annotations

import secrets
from collections import defaultdict
from collections.abc import Mapping
from functools import cache
from typing import Any

from sqlalchemy import Double, Update, and_, bindparam, delete, exists, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.protocol import RegisterRequest
from corral.core.states import WorkerState
from corral.store.schema import workers


async def insert_worker(connection: AsyncConnection, request: RegisterRequest, now: float) -> tuple[str, list[str]]:
    """A new worker id each time; a LOST row under the same name is the same machine come back, and goes.
    Returns the new id and the ids it replaces."""
    replaced = list((await connection.execute(
        delete(workers).where(workers.c.name == request.name, workers.c.state == WorkerState.LOST)
        .returning(workers.c.id))).scalars())
    worker_id = f"{request.name[:57]}-{secrets.token_hex(3)}"  # fits the id column (64) whatever the name
    await connection.execute(workers.insert().values(
        id=worker_id, name=request.name, address=request.address, state=WorkerState.ALIVE,
        cpu=request.capacity.cpu, memory=request.capacity.memory, gpu=request.capacity.gpu,
        gpu_names=request.gpu_names, labels=request.labels, last_heartbeat=now, registered_at=now,
        pool=request.pool, custom=request.capacity.custom,
        gpu_devices=[gpu.model_dump() for gpu in request.gpus], pythons=request.pythons,
        environments=[environment.model_dump() for environment in request.environments],
        filesystem=request.filesystem, shared_fs=request.shared_fs, run_as_owners=request.run_as_owners,
        account=request.account,
    ))
    return worker_id, replaced


async def mark_seen(connection: AsyncConnection, worker_id: str, now: float, **facts: Any) -> bool:
    """Note a live worker's heartbeat (and the facts it sent); False when it is unknown or LOST."""
    values = {"_id": worker_id, "_now": now, **{f"v_{name}": value for name, value in facts.items()}}
    seen = await connection.execute(_mark_seen(tuple(sorted(facts))), values)
    return seen.rowcount > 0


# The statements every heartbeat, report group and reaper's turn runs, made once (the workers' ids an expanding
# parameter, the times bound ones): a statement made afresh cost more to build and to walk for SQLAlchemy's cache key
# than to run.
@cache
def _mark_seen(facts: tuple[str, ...]) -> Update:
    """A live worker's heartbeat, with these of its columns the facts it sent set."""
    return (update(workers).where(workers.c.id == bindparam("_id"), workers.c.state == WorkerState.ALIVE)
            .values(last_heartbeat=bindparam("_now"), **{name: bindparam(f"v_{name}") for name in facts}))


_LOCK_IN_ID_ORDER = (select(workers.c.id).where(workers.c.id.in_(bindparam("ids", expanding=True)))
                     .order_by(workers.c.id).with_for_update())


@cache
def _mark_alive_seen(sqlite: bool) -> Update:
    """Those of the workers that are ALIVE heard at `heard`, never moved back; returns their ids."""
    later = func.max if sqlite else func.greatest  # SQLite's max of two values is PostgreSQL's greatest
    return (update(workers)
            .where(workers.c.id.in_(bindparam("ids", expanding=True)), workers.c.state == WorkerState.ALIVE)
            .values(last_heartbeat=later(workers.c.last_heartbeat, bindparam("heard", type_=Double())))
            .returning(workers.c.id))


async def mark_all_seen(connection: AsyncConnection, seen: Mapping[str, float]) -> set[str]:
    """Note many live workers' heartbeats (worker id -> when it was heard), a statement for each distinct time;
    returns those that are ALIVE (the others are unknown or LOST, and were not touched). A mark never moves a
    worker's last heartbeat back (another write may have noted a later one). On PostgreSQL their rows are locked
    first in id order, the order every other transaction locking several workers (the capacity fence) takes them in,
    so the two never deadlock."""
    sqlite = connection.dialect.name == "sqlite"
    if not sqlite:
        await connection.execute(_LOCK_IN_ID_ORDER, {"ids": list(seen)})
    by_time: dict[float, list[str]] = defaultdict(list)
    for worker_id, heard in seen.items():
        by_time[heard].append(worker_id)
    alive: set[str] = set()
    for heard, worker_ids in by_time.items():
        alive.update((await connection.execute(_mark_alive_seen(sqlite), {"ids": worker_ids, "heard": heard}))
                     .scalars())
    return alive


_SILENT = and_(workers.c.state == WorkerState.ALIVE, workers.c.last_heartbeat < bindparam("silent_before"))
_FORGETTABLE = and_(workers.c.state == WorkerState.LOST, workers.c.last_heartbeat < bindparam("lost_before"))
_SILENT_WORKERS = select(workers.c.id, workers.c.name, workers.c.last_heartbeat).where(_SILENT)
_REAPING_DUE = select(exists().where(or_(_SILENT, _FORGETTABLE)))
_MARK_LOST = update(workers).where(workers.c.id.in_(bindparam("ids", expanding=True))).values(state=WorkerState.LOST)
_FORGET_LOST = delete(workers).where(_FORGETTABLE)


async def silent_workers(connection: AsyncConnection, before: float) -> list:
    """ALIVE workers last heard from before `before`: id, name, last_heartbeat."""
    return list((await connection.execute(_SILENT_WORKERS, {"silent_before": before})).all())


async def reaping_due(connection: AsyncConnection, silent_before: float, lost_before: float) -> bool:
    """Whether an ALIVE worker is silent since `silent_before`, or a LOST one since `lost_before`: the reaper's
    targets, read before it takes the writer for them."""
    return (await connection.execute(_REAPING_DUE, {"silent_before": silent_before,
                                                    "lost_before": lost_before})).scalar()


async def mark_lost(connection: AsyncConnection, worker_ids: list[str]) -> None:
    await connection.execute(_MARK_LOST, {"ids": worker_ids})


async def forget_lost(connection: AsyncConnection, before: float) -> int:
    """Delete LOST workers not heard from since `before` (their history stays); returns how many."""
    pruned = await connection.execute(_FORGET_LOST, {"lost_before": before})
    return pruned.rowcount
