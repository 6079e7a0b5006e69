"""The full placement analysis of one job, for `corral info`: each worker, and why it can or cannot take a task.

Pure, like the pass it explains; it judges a task of the job against each worker alone,
in the order a person checks: the pool, the labels, the submission directory, the size, then the free room.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from corral.scheduling.preemption import RunningTask
from corral.scheduling.reasons import format_amount, format_devices, format_share_room, free_for, share_room
from corral.scheduling.rooms import EPS, Request, WorkerRoom
from corral.scheduling.snapshot import JobPlacement


@dataclass(frozen=True)
class WorkerVerdict:
    worker_id: str
    name: str
    fits: bool
    why: str


def judge_workers(job: JobPlacement, request: Request, rooms: Sequence[WorkerRoom],
                  failed_on: Iterable[str] = ()) -> list[WorkerVerdict]:
    failed = set(failed_on)
    return [_judge(job, request, room, room.id in failed) for room in rooms]


def _judge(job: JobPlacement, request: Request, room: WorkerRoom, failed_here: bool) -> WorkerVerdict:
    def verdict(fits: bool, why: str) -> WorkerVerdict:
        return WorkerVerdict(room.id, room.name, fits, why)

    if room.pool != job.pool:
        return verdict(False, f"in pool {room.pool}, not {job.pool}")
    for constraint in job.constraints:
        if not constraint.admits(room):
            return verdict(False, constraint.refusal(room))
    need, gpu_memory = request.amounts(), request.gpu_memory
    for resource, amount in need.items():
        if amount > room.capacity(resource, gpu_memory) + EPS:
            return verdict(False, f"too small: has {_has(room, resource, gpu_memory, free=False)}, "
                                  f"a task needs {format_amount(resource, amount, gpu_memory)}")
    for resource, amount in need.items():
        if amount > free_for(room, resource, request) + EPS:
            if resource == "gpu" and request.share:  # what each device has left, not how many are unused
                return verdict(False, f"busy: {format_share_room(share_room(room), gpu_memory)}, a task needs "
                                      f"{format_amount(resource, amount, gpu_memory)}")
            shared = f" ({len(room.gpu_shared)} holding shares)" if resource == "gpu" and room.gpu_shared else ""
            return verdict(False, f"busy: {_has(room, resource, gpu_memory, free=True)} free "
                                  f"of {_has(room, resource, gpu_memory, free=False)}{shared}, a task needs "
                                  f"{format_amount(resource, amount, gpu_memory)}")
    note = " (a task of this job failed here before: others are tried first)" if failed_here else ""
    return verdict(True, "fits now" + note)


def _has(room: WorkerRoom, resource: str, gpu_memory: int, *, free: bool) -> str:
    """"8 cpu"; for GPUs under a memory rule, their memory: "2 gpu of 24G"."""
    if resource == "gpu" and gpu_memory:
        return format_devices(room.memories(room.free_gpu_ids if free else range(room.gpu)))
    return format_amount(resource, room.free(resource) if free else room.capacity(resource))


def quota_use(project: str, limits: Mapping[str, float],
              running: Sequence[RunningTask]) -> dict[str, tuple[float, float]]:
    """(used, limit) per limited resource of the project."""
    used: dict[str, float] = defaultdict(float)
    for task in running:
        if task.project == project:
            for resource, amount in task.request.amounts().items():
                used[resource] += amount
    return {resource: (used[resource], limit) for resource, limit in limits.items()}
