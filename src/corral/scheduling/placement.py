"""Placement: which worker each pending task goes to, decided in memory over a snapshot.

No I/O happens here. The pass reads top to bottom as a person would explain it:
  1. take pending units in submission order (a gang job whole, or one task of an independent job);
  2. a unit that no alive worker could ever hold waits, saying so;
  3. a gang is placed whole on a scratch copy of the free capacity, or not at all;
  4. an independent task goes to the first worker where it fits;
  5. a unit that does not fit now waits, with the largest free room named, and does not
     block the units behind it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from corral.core.lifecycle import TargetKey


@dataclass(frozen=True)
class Request:
    cpu: float
    memory: int
    gpu: int


@dataclass
class WorkerRoom:
    """What one alive worker has, and has free, in this snapshot."""

    id: str
    name: str
    cpu: float
    memory: int
    gpu: int
    free_cpu: float
    free_memory: int
    free_gpu_ids: list[int] = field(default_factory=list)

    def fits(self, request: Request) -> bool:
        return (
            request.cpu <= self.free_cpu + 1e-9
            and request.memory <= self.free_memory
            and request.gpu <= len(self.free_gpu_ids)
        )

    def could_ever_fit(self, request: Request) -> bool:
        return request.cpu <= self.cpu + 1e-9 and request.memory <= self.memory and request.gpu <= self.gpu

    def take(self, request: Request) -> list[int]:
        self.free_cpu -= request.cpu
        self.free_memory -= request.memory
        gpu_ids, self.free_gpu_ids = self.free_gpu_ids[: request.gpu], self.free_gpu_ids[request.gpu :]
        return gpu_ids


@dataclass(frozen=True)
class Unit:
    key: TargetKey
    task_ids: tuple[int, ...]
    request: Request  # per task


@dataclass(frozen=True)
class Assignment:
    task_id: int
    worker_id: str
    gpu_ids: tuple[int, ...]


@dataclass(frozen=True)
class Waiting:
    """Why a unit was not placed, as data; `sentence()` formats it when someone looks."""

    request: Request
    tasks: int
    alive_workers: int
    never_fits: bool
    best: WorkerRoom | None
    placeable: int = 0  # for a gang: how many of its tasks would fit now

    def sentence(self) -> str:
        need = _describe(self.request)
        if self.alive_workers == 0:
            return "no worker is alive; waiting for one to register"
        if self.never_fits:
            return f"needs {need} per task; no alive worker is that large (waiting for one to join)"
        room = "nothing free"
        if self.best is not None:
            room = f"largest free: {_describe_free(self.best)} on {self.best.name}"
        if self.tasks > 1:
            return (
                f"gang of {self.tasks} needs {need} per task; only {self.placeable} fit now; {room}"
            )
        return f"needs {need}; {room}"


@dataclass
class Placement:
    assignments: dict[TargetKey, list[Assignment]] = field(default_factory=dict)
    waiting: dict[TargetKey, Waiting] = field(default_factory=dict)


def place(units: Sequence[Unit], rooms: Sequence[WorkerRoom]) -> Placement:
    """Place units in the order given on the rooms given (mutating neither)."""
    free = [replace(room, free_gpu_ids=list(room.free_gpu_ids)) for room in rooms]
    result = Placement()
    blocked: dict[Request, Waiting] = {}  # one failed request of a kind settles its equals in this pass
    for unit in units:
        # 1-2. A request that already failed alone, or that no worker could ever hold, waits.
        single = len(unit.task_ids) == 1
        if single and unit.request in blocked:
            result.waiting[unit.key] = blocked[unit.request]
            continue
        if not any(room.could_ever_fit(unit.request) for room in free):
            result.waiting[unit.key] = _waiting(unit, free, never_fits=True)
            continue
        # 3-4. Place every task of the unit on a scratch copy; keep it only if all fit.
        scratch = [replace(room, free_gpu_ids=list(room.free_gpu_ids)) for room in free]
        placed = _first_fit(unit, scratch)
        if len(placed) == len(unit.task_ids):
            result.assignments[unit.key] = placed
            free = scratch
            continue
        # 5. It waits, and those behind it go on.
        waiting = _waiting(unit, free, never_fits=False, placeable=len(placed))
        result.waiting[unit.key] = waiting
        if single:
            blocked[unit.request] = waiting
    return result


def _first_fit(unit: Unit, rooms: list[WorkerRoom]) -> list[Assignment]:
    placed = []
    for task_id in unit.task_ids:
        room = next((r for r in rooms if r.fits(unit.request)), None)
        if room is None:
            break
        placed.append(Assignment(task_id, room.id, tuple(room.take(unit.request))))
    return placed


def _waiting(unit: Unit, rooms: list[WorkerRoom], *, never_fits: bool, placeable: int = 0) -> Waiting:
    best = max(rooms, key=lambda r: (len(r.free_gpu_ids), r.free_cpu, r.free_memory), default=None)
    return Waiting(unit.request, len(unit.task_ids), len(rooms), never_fits, best, placeable)


def _describe(request: Request) -> str:
    parts = [f"cpu {request.cpu:g}"]
    if request.memory:
        parts.append(f"memory {format_bytes(request.memory)}")
    if request.gpu:
        parts.append(f"{request.gpu} GPU" + ("s" if request.gpu > 1 else ""))
    return ", ".join(parts)


def _describe_free(room: WorkerRoom) -> str:
    parts = [f"cpu {room.free_cpu:g}", f"memory {format_bytes(room.free_memory)}"]
    if room.gpu:
        free = len(room.free_gpu_ids)
        parts.append(f"{free} GPU" + ("" if free == 1 else "s"))
    return ", ".join(parts)


def format_bytes(size: int) -> str:
    for unit, scale in (("T", 2**40), ("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if size >= scale:
            return f"{size / scale:.3g}{unit}"
    return f"{size}B"
