"""The pool as the router sees it: free room per worker and what each deployment's replicas hold.

`fits` answers the eviction policy's one question with the placement model itself (CPUs,
memory and GPU devices per worker), so no fit rules are written by hand.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from corral.core.serving import REPLICA_COUNTED, ReplicaState
from corral.scheduling.placement import Request, WorkerRoom
from corral.store.deployments import replica_tasks_holding
from corral.store.scheduling_reads import rooms_and_running
from corral.store.store import Store

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection


@dataclass(frozen=True)
class Holding:
    worker_id: str
    request: Request
    gpu_ids: tuple[int, ...] = ()
    leaving: bool = False  # its replica is on its way out: the room frees by itself, and it counts for nothing


@dataclass
class Pool:
    rooms: list[WorkerRoom] = field(default_factory=list)
    holdings: dict[str, list[Holding]] = field(default_factory=dict)  # deployment name -> its placed replicas

    def placed(self, name: str) -> int:
        """Replicas of `name` placed and staying."""
        return sum(not holding.leaving for holding in self.holdings.get(name, ()))

    def fits(self, request: Request, count: int, freed: Iterable[str] = (),
             reserved: Mapping[str, tuple[Request, int]] | None = None) -> bool:
        """Would `count` replicas of `request` fit once the deployments in `freed`, and every replica on its way
        out, released what they hold, after the replicas in `reserved` (wanted, not placed yet: (request, count))
        took theirs?

        A reserved replica that fits nowhere waits in placement and holds nothing, so it blocks nothing."""
        rooms = [copy.deepcopy(room) for room in self.rooms]
        by_id = {room.id: room for room in rooms}
        freed = set(freed)
        for name, held in self.holdings.items():
            for holding in held:
                room = by_id.get(holding.worker_id)
                if room is not None and (holding.leaving or name in freed):
                    room.give(holding.request, holding.gpu_ids)
        for each, n in (reserved or {}).values():
            for _ in range(n):
                if not _take_first(rooms, each):
                    break
        return all(_take_first(rooms, request) for _ in range(count))

    def could_ever_fit(self, request: Request) -> bool:
        return any(room.could_ever_fit(request) for room in self.rooms)


    def to_json(self) -> dict:
        """The rooms and holdings as a standalone router receives them in the catalog."""
        return {"rooms": [dataclasses.asdict(room) for room in self.rooms],
                "holdings": {name: [dataclasses.asdict(h) for h in held] for name, held in self.holdings.items()}}

    @classmethod
    def from_json(cls, rooms: list[dict], holdings: dict[str, list[dict]]) -> Pool:
        return cls([WorkerRoom(**{**room, "gpu_memory": tuple(room["gpu_memory"]),
                                 "shared_fs": tuple(room.get("shared_fs") or ()),
                                 "pythons": tuple(room.get("pythons") or ()),
                                 "gpu_shared": _by_device(room.get("gpu_shared")),
                                 "gpu_memory_shared": _by_device(room.get("gpu_memory_shared"))})
                    for room in rooms],
                   {name: [Holding(h["worker_id"], _request(h["request"]), tuple(h["gpu_ids"]), h["leaving"])
                           for h in held] for name, held in holdings.items()})


def _request(fields: dict) -> Request:
    """A holding's request from JSON, where its custom pairs arrive as lists."""
    return Request(**{**fields, "custom": tuple((name, amount) for name, amount in fields["custom"])})


def _by_device(amounts: dict[str, int] | None) -> dict[int, int]:
    """A per-device map from JSON, where the device numbers arrive as strings."""
    return {int(device): amount for device, amount in (amounts or {}).items()}


def _take_first(rooms: list[WorkerRoom], request: Request) -> bool:
    """Book `request` on the first room it fits; says whether one did."""
    room = next((room for room in rooms if room.fits(request)), None)
    if room is not None:
        room.take(request)
    return room is not None


async def read_pool(connection: AsyncConnection) -> Pool:
    """The rooms and the replicas' tasks as placement reads them: one reading of who holds what."""
    rooms, running = await rooms_and_running(connection)
    by_task = {task.task_id: task for task in running}
    rows = await replica_tasks_holding(connection)
    holdings: dict[str, list[Holding]] = {}
    for row in rows:
        task = by_task.get(row.id)
        if task is None:
            continue  # placed between the two reads: the next read shows it
        holdings.setdefault(row.name, []).append(Holding(
            task.worker_id, task.request, task.gpu_ids, leaving=ReplicaState(row.state) not in REPLICA_COUNTED))
    return Pool(rooms, holdings)


class KeptPool:
    """The pool as `read` last found it, read again only after a commit that may have moved state.

    Routers look at the pool every second (the controller's own, and each standalone one through the catalog),
    and on a cluster where nothing moves each look read the same rows: a few store reads a second, beside the
    requests the controller routes. Liveness marks, the registry's row and start estimates move no state, so
    they leave the pool as it was. Only where every writer is this store (SQLite): on a shared store another
    controller's commits are not counted here, and each look reads."""

    def __init__(self, store: Store, read: Callable[[AsyncConnection], Awaitable[Pool]] = read_pool) -> None:
        self.store = store
        self.read = read
        self._kept: tuple[int, Pool] | None = None  # (the store's state commits before the read, what it found)

    async def __call__(self) -> Pool:
        commits = self.store.state_commits  # before the read: a commit that ends during it makes the read stale
        if self._kept is not None and self._kept[0] == commits:
            return self._kept[1]
        async with self.store.read() as connection:
            pool = await self.read(connection)
        if self.store.is_sqlite:
            self._kept = (commits, pool)
        return pool
