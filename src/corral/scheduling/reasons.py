"""Why a job waits, as data; `sentence()` formats it for a person when someone looks.

Each reason names the binding constraint with its numbers, so the reader knows what to
change: a smaller request, another pool, a quota, or patience.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from corral.core.spec_text import format_bytes
from corral.scheduling.rooms import SHARES

if TYPE_CHECKING:  # constraints name the reasons they give
    from corral.core.constraints import AnyConstraint
    from corral.scheduling.rooms import Request, WorkerRoom

DEFAULT_POOL = "default"


def _size(size: float) -> str:
    """As `--memory` and `--gpu-memory` read it back: 40G is 40*10**9."""
    return format_bytes(size, compact=True)


def format_amount(resource: str, amount: float, gpu_memory: int = 0) -> str:
    """"8 gpu", "0.5 cpu", "4G memory", "1 gpu with at least 40G memory", "0.5 gpu (a share of one device)"."""
    if resource == "memory":
        return f"{_size(amount)} memory"
    if resource != "gpu":
        return f"{amount:g} {resource}"
    text = f"{round(amount, 2):g} gpu"  # shares are hundredths: their sums print as such
    if 0 < amount < 1:
        reserving = f", reserving {_size(gpu_memory)} of its memory" if gpu_memory else ""
        return f"{text} (a share of one device{reserving})"
    return f"{text} with at least {_size(gpu_memory)} memory" if gpu_memory else text


def format_amounts(amounts: dict[str, float], gpu_memory: int = 0) -> str:
    return ", ".join(format_amount(r, a, gpu_memory) for r, a in amounts.items() if a or r == "cpu")


def format_devices(memories: Sequence[int]) -> str:
    """"2 gpu of 24G", "1 gpu of 24G, 1 gpu of 80G": what a worker's GPUs offer to a request for memory."""
    if not memories:
        return "no gpu"
    counts = Counter(sorted(memories))
    return ", ".join(f"{n} gpu of {_size(m) if m else 'unknown memory'}" for m, n in counts.items())


def format_share_room(room: Sequence[tuple[float, int]], gpu_memory: int = 0) -> str:
    """What a worker's devices have free for a share: "1 device with 0.25 gpu free, 2 devices with 1 gpu free";
    with a memory reservation, the bytes each has left too. `room`: (share free, bytes left) per device."""
    if not room:
        return "no device with room for a share"
    counts = Counter(sorted(room, reverse=True))
    return ", ".join(
        f"{n} device{'s' if n > 1 else ''} with {share:g} gpu{f' and {_size(left)}' if gpu_memory else ''} free"
        for (share, left), n in counts.items())


def free_for(room: WorkerRoom, resource: str, request: Request) -> float:
    """The free room of a resource as this request sees it: for a share, the most one device has free."""
    if resource == "gpu" and request.share:
        return room.free_share(request.gpu_memory)
    return room.free(resource, request.gpu_memory)


def share_room(room: WorkerRoom) -> tuple[tuple[float, int], ...]:
    """(share free, bytes left) per device with any room for a share: unused devices whole, then shared ones."""
    unused = [(1.0, room.device_memory(d)) for d in room.free_gpu_ids]
    shared = [((SHARES - used) / SHARES, room.device_memory(d) - room.gpu_memory_shared.get(d, 0))
              for d, used in sorted(room.gpu_shared.items()) if used < SHARES]
    return tuple(unused + shared)


def _is_share(need: dict[str, float]) -> bool:
    """A task that asks for part of one device (per task, any fraction of a GPU is a share)."""
    return 0 < need.get("gpu", 0.0) < 1


def _in_pool(pool: str) -> str:
    return "" if pool == DEFAULT_POOL else f" in pool {pool}"


class Reason:
    def sentence(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class NoWorkerAlive(Reason):
    def sentence(self) -> str:
        return "no worker is alive; waiting for one to register"


@dataclass(frozen=True)
class NoWorkerInPool(Reason):
    pool: str

    def sentence(self) -> str:
        return f"no alive worker in pool {self.pool}; waiting for one to join"


@dataclass(frozen=True)
class NoWorkerMatches(Reason):
    pool: str
    constraints: tuple[AnyConstraint, ...]

    def sentence(self) -> str:
        which = "constraint" if len(self.constraints) == 1 else "constraints"
        return f"no worker{_in_pool(self.pool)} matches {which} {', '.join(map(str, self.constraints))}"


@dataclass(frozen=True)
class NoWorkerShares(Reason):
    """The job starts in its submission directory, its files were not uploaded, and no worker sees it."""

    pool: str
    path: str

    def sentence(self) -> str:
        return (f"no worker in pool {self.pool} shares the file system of {self.path} "
                f"(its files were not uploaded)")


@dataclass(frozen=True)
class NoWorkerHasPython(Reason):
    """The job asks for a Python no alive worker of its pool can build environments with; one may join."""

    pool: str
    version: str

    def sentence(self) -> str:
        return f"no worker in pool {self.pool} has python {self.version}; waiting for one that has"


@dataclass(frozen=True)
class TooLarge(Reason):
    """No worker present could hold one task even empty; one may join, so it waits."""

    pool: str
    need: dict[str, float]  # per task
    resource: str | None  # the one no worker has enough of, if a single one
    largest: float = 0.0
    worker: str = ""
    gpu_memory: int = 0  # bytes each GPU must have
    devices: tuple[int, ...] = ()  # the memory of the worker's GPUs, when too little memory is what binds

    def sentence(self) -> str:
        need = format_amounts(self.need, self.gpu_memory)
        if self.resource is None:
            return (f"needs {need} per task; no worker{_in_pool(self.pool)} is that large "
                    f"(waiting for one to join)")
        if self.resource == "gpu" and self.gpu_memory:
            largest = f"{self.worker} has {format_devices(self.devices)}"
        else:
            largest = f"{format_amount(self.resource, self.largest)} on {self.worker}"
        that_much = "a device that could hold it" if _is_share(self.need) and self.resource == "gpu" else "that much"
        return (f"needs {format_amount(self.resource, self.need[self.resource], self.gpu_memory)} per task; "
                f"no worker{_in_pool(self.pool)} has {that_much} (largest: {largest}); waiting for one to join")


@dataclass(frozen=True)
class NoRoom(Reason):
    """Some worker could hold it, none has the room free now."""

    pool: str
    need: dict[str, float]  # per task
    tasks: int
    placeable: int  # for a gang: how many of its tasks fit now
    resource: str | None  # the resource that binds on every worker, if a single one
    most_free: float = 0.0
    worker: str = ""
    gpu_memory: int = 0  # bytes each GPU must have; for a share, the bytes of its device it reserves
    devices: tuple[int, ...] = ()  # the memory of the worker's free GPUs, when too little memory is what binds
    shares: tuple[tuple[float, int], ...] = ()  # for a share with memory: (share free, bytes left) per device
    shared_devices: int = 0  # for whole devices: those of its workers that hold shares, so are not handed out whole

    def sentence(self) -> str:
        where = _in_pool(self.pool)
        if self.resource is not None:
            need = format_amount(self.resource, self.need[self.resource], self.gpu_memory)
            if self.resource == "gpu" and _is_share(self.need):
                free = self._share_free()
            elif self.resource == "gpu" and self.gpu_memory and self.worker:
                free = (f"most free on one worker: {self.most_free:g} "
                        f"({self.worker} has {format_devices(self.devices)} free)")
            elif self.worker:
                free = f"most free on one worker: {format_amount(self.resource, self.most_free)} ({self.worker})"
            else:
                free = f"no worker has any {self.resource} free"
        else:
            need = format_amounts(self.need, self.gpu_memory)
            free = "no worker has all of it free at once"
        if self.shared_devices:
            holds = "holds" if self.shared_devices == 1 else "hold"
            free += f"; {self.shared_devices} gpu {holds} shares (a shared device is not handed out whole)"
        if self.tasks > 1:
            return f"gang of {self.tasks} needs {need} per task{where}; only {self.placeable} fit now; {free}"
        return f"needs {need}{where} on one worker; {free}"

    def _share_free(self) -> str:
        """The most one device has free for the share; with a memory reservation, what the worker's devices have
        left, since either the share or the memory may be what binds."""
        left = f" with {_size(self.gpu_memory)} left" if self.gpu_memory else ""
        devices = f" ({self.worker} has {format_share_room(self.shares, self.gpu_memory)})" if self.shares else ""
        if self.most_free > 0:
            return f"the most any device{left} has free is {self.most_free:g}, on {self.worker}{devices}"
        return f"no device{left} has any share free{devices}"


@dataclass(frozen=True)
class OverQuota(Reason):
    project: str
    resource: str
    used: float
    limit: float
    asks: float

    def sentence(self) -> str:
        used, limit = (_size(self.used), _size(self.limit)) if self.resource == "memory" else (
            f"{self.used:g}", f"{self.limit:g}")
        return (f"over project quota: {self.resource} {used}/{limit} "
                f"(project {self.project} asks {format_amount(self.resource, self.asks)} more)")


@dataclass(frozen=True)
class AtMostRunning(Reason):
    """The job's own cap on its tasks holding room at once (`--max-running`), as an array's `%K`."""

    holding: int
    limit: int

    def sentence(self) -> str:
        return f"{self.holding} of its tasks run, at most {self.limit} at once (--max-running)"


@dataclass(frozen=True)
class BehindReservation(Reason):
    job_id: int

    def sentence(self) -> str:
        return f"waiting behind reservation for job {self.job_id}"


@dataclass(frozen=True)
class Reserved(Reason):
    """It waited past its pool's reservation time: room is held for it."""

    waiting: Reason
    workers: tuple[str, ...]

    def sentence(self) -> str:
        return f"{self.waiting.sentence()}; room held for it on {', '.join(self.workers)}"


@dataclass(frozen=True)
class Preempting(Reason):
    tasks: int
    jobs: tuple[int, ...]

    def sentence(self) -> str:
        return f"preempting {_lower_priority(self.tasks, self.jobs)} to make room"


@dataclass(frozen=True)
class Moving(Reason):
    """A gang the free room would hold in total, but not as it lies on the devices: smaller tasks restart elsewhere."""

    tasks: int
    jobs: tuple[int, ...]

    def sentence(self) -> str:
        return (f"moving {_lower_priority(self.tasks, self.jobs)} elsewhere: the free room would hold it, but is cut "
                "into pieces")


def _lower_priority(tasks: int, jobs: tuple[int, ...]) -> str:
    """"2 lower-priority tasks (jobs 4, 7)": whom a preemption or a move stops."""
    plural = "task" if tasks == 1 else "tasks"
    which = "job" if len(jobs) == 1 else "jobs"
    return f"{tasks} lower-priority {plural} ({which} {', '.join(map(str, jobs))})"


@dataclass(frozen=True)
class AwaitingPreempted(Reason):
    """Tasks already being preempted (or stopped) free enough room: no one else is evicted."""

    tasks: int

    def sentence(self) -> str:
        return f"waiting for {self.tasks} stopping task{'s' if self.tasks != 1 else ''} to free their room"


@dataclass(frozen=True)
class WaitingForJobs(Reason):
    jobs: tuple[tuple[int, str], ...]  # (job id, its state now)
    any_outcome: bool

    def sentence(self) -> str:
        ids = ", ".join(str(job) for job, _ in self.jobs)
        states = ", ".join(state for _, state in self.jobs)
        which = "job" if len(self.jobs) == 1 else "jobs"
        verb = "to end" if self.any_outcome else "to succeed"
        return f"waiting for {which} {ids} {verb} (now {states})"


@dataclass(frozen=True)
class NotBefore(Reason):
    at: float

    def sentence(self) -> str:
        try:
            return f"not before {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(self.at))}"
        except (OverflowError, OSError, ValueError):  # past what a calendar date can say (a row from before bounds)
            return f"not before {self.at:g} (unix seconds)"


@dataclass(frozen=True)
class DependencyFailed(Reason):
    job_id: int
    state: str

    def sentence(self) -> str:
        return f"dependency job {self.job_id} ended {self.state}; this job cannot run"


@dataclass(frozen=True)
class TimedOut(Reason):
    timeout: float
    last: Reason | None

    def sentence(self) -> str:
        text = f"not placed within its scheduling timeout ({self.timeout:g}s)"
        return f"{text}; last reason: {self.last.sentence()}" if self.last else text
