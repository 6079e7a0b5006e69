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

from corral.core.spec import format_bytes

if TYPE_CHECKING:  # constraints name the reasons they give
    from corral.core.constraints import AnyConstraint

DEFAULT_POOL = "default"


def _size(size: float) -> str:
    """As `--memory` and `--gpu-memory` read it back: 40G is 40*10**9."""
    return format_bytes(size, compact=True)


def format_amount(resource: str, amount: float, gpu_memory: int = 0) -> str:
    """"8 gpu", "0.5 cpu", "4G memory", "1 gpu with at least 40G memory"."""
    value = _size(amount) if resource == "memory" else f"{amount:g}"
    text = f"{value} {resource}"
    return f"{text} with at least {_size(gpu_memory)} memory" if resource == "gpu" and gpu_memory else text


def format_amounts(amounts: dict[str, float], gpu_memory: int = 0) -> str:
    return ", ".join(format_amount(r, a, gpu_memory) for r, a in amounts.items() if a or r == "cpu")


def format_devices(memories: Sequence[int]) -> str:
    """"2 gpu of 24G", "1 gpu of 24G, 1 gpu of 80G": what a worker's GPUs offer to a request for memory."""
    if not memories:
        return "no gpu"
    counts = Counter(sorted(memories))
    return ", ".join(f"{n} gpu of {_size(m) if m else 'unknown memory'}" for m, n in counts.items())


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
        return (f"needs {format_amount(self.resource, self.need[self.resource], self.gpu_memory)} per task; "
                f"no worker{_in_pool(self.pool)} has that much (largest: {largest}); waiting for one to join")


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
    gpu_memory: int = 0  # bytes each GPU must have
    devices: tuple[int, ...] = ()  # the memory of the worker's free GPUs, when too little memory is what binds

    def sentence(self) -> str:
        where = _in_pool(self.pool)
        if self.resource is not None:
            need = format_amount(self.resource, self.need[self.resource], self.gpu_memory)
            if self.resource == "gpu" and self.gpu_memory and self.worker:
                free = (f"most free on one worker: {self.most_free:g} "
                        f"({self.worker} has {format_devices(self.devices)} free)")
            elif self.worker:
                free = f"most free on one worker: {format_amount(self.resource, self.most_free)} ({self.worker})"
            else:
                free = f"no worker has any {self.resource} free"
        else:
            need = format_amounts(self.need, self.gpu_memory)
            free = "no worker has all of it free at once"
        if self.tasks > 1:
            return f"gang of {self.tasks} needs {need} per task{where}; only {self.placeable} fit now; {free}"
        return f"needs {need}{where} on one worker; {free}"


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
        plural = "task" if self.tasks == 1 else "tasks"
        which = "job" if len(self.jobs) == 1 else "jobs"
        return (f"preempting {self.tasks} lower-priority {plural} ({which} {', '.join(map(str, self.jobs))}) "
                f"to make room")


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
