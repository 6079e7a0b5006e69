"""What a scheduling pass knows of the cluster, and which pending jobs may be placed at all.

The store fills a `ClusterSnapshot` in a few reads; everything after is pure. A job may be
placed once the jobs it waits for have ended as it asked and its begin time has passed;
a dependency that ended other than SUCCEEDED dooms a job that needed its success.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from corral.core.constraints import AnyConstraint, PythonConstraint, SharedDirectory, parse_constraint
from corral.scheduling.capacity import CapacityIndex
from corral.scheduling.policy import DEFAULT_POOL, DEFAULT_PROJECT, Policy
from corral.scheduling.preemption import RunningTask
from corral.scheduling.reasons import DependencyFailed, NotBefore, Reason, WaitingForJobs
from corral.scheduling.rooms import WorkerRoom, custom_slots

ENDED = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "UNSCHEDULABLE", "LOST"})


@dataclass(frozen=True)
class JobPlacement:
    """The placement facts of one job, read from its spec."""

    pool: str = DEFAULT_POOL
    project: str = DEFAULT_PROJECT
    priority: int = 0
    constraints: tuple[AnyConstraint, ...] = ()  # on labels, then the implicit ones (python, shared directory)
    custom: tuple[tuple[str, float], ...] = ()
    gpu_memory: int = 0  # bytes each of its GPUs must have
    spread: bool = False
    max_running: int | None = None
    after: tuple[int, ...] = ()
    after_any: tuple[int, ...] = ()
    begin: float | None = None
    gang: bool = False

    def __post_init__(self) -> None:
        """`gated`: whether anything besides room may hold the job back (dependencies, a begin time); where not,
        `gate` answers None at once, and a caller asking of many jobs skips its call. A plain attribute worked out
        once, not a field (a forecast reads it for each of ten thousand units)."""
        object.__setattr__(self, "gated", bool(self.after or self.after_any or self.begin))

    @classmethod
    def from_spec(cls, spec: Mapping, *, priority: int, gang: bool) -> JobPlacement:
        resources = spec.get("resources") or {}
        constraints: list[AnyConstraint] = [parse_constraint(c) for c in spec.get("constraints") or ()]
        if spec.get("python"):
            constraints.append(PythonConstraint(spec["python"]))
        workdir = spec.get("workdir")
        if workdir and not spec.get("bundle"):  # with its files uploaded, it runs anywhere: in place or in a copy
            constraints.append(SharedDirectory(workdir["path"], workdir["filesystem"]))
        return cls(
            pool=spec.get("pool") or DEFAULT_POOL, project=spec.get("project") or DEFAULT_PROJECT,
            priority=priority, constraints=tuple(constraints),
            custom=custom_slots(resources.get("custom")),
            gpu_memory=int(resources.get("gpu_memory") or 0),
            spread=bool(spec.get("spread")), max_running=spec.get("max_running"), after=tuple(spec.get("after") or ()),
            after_any=tuple(spec.get("after_any") or ()), begin=spec.get("begin"), gang=gang,
        )


NO_FACTS = JobPlacement()  # the placement facts of a job none were read for: the defaults, made once


@dataclass(frozen=True)
class JobEnd:
    state: str
    finished_at: float | None = None


@dataclass
class ClusterSnapshot:
    rooms: list[WorkerRoom] = field(default_factory=list)
    running: list[RunningTask] = field(default_factory=list)
    jobs: dict[int, JobPlacement] = field(default_factory=dict)  # active jobs
    avoid: dict[int, frozenset[str]] = field(default_factory=dict)  # pending task -> workers it failed on
    dependencies: dict[int, JobEnd] = field(default_factory=dict)  # jobs named in after / after_any
    policy: Policy = field(default_factory=Policy)
    unreadable: dict[int, str] = field(default_factory=dict)  # active job -> why its spec could not be read
    index: CapacityIndex | None = None  # kept across passes; else built from `rooms` and `running` when asked

    def capacity(self) -> CapacityIndex:
        """The index placement reads."""
        if self.index is None:
            self.index = CapacityIndex(self.rooms, self.running)
        return self.index


def gate(job: JobPlacement, dependencies: Mapping[int, JobEnd], now: float) -> Reason | None:
    """None when the job may be placed now; else why it waits (or, DependencyFailed, why it never will)."""
    if not job.gated:
        return None
    for job_id in job.after:
        end = dependencies.get(job_id)
        if end is not None and end.state in ENDED and end.state != "SUCCEEDED":
            return DependencyFailed(job_id, end.state)
    unmet = [(job_id, _state(dependencies, job_id)) for job_id in job.after
             if _state(dependencies, job_id) != "SUCCEEDED"]
    if unmet:
        return WaitingForJobs(tuple(unmet), any_outcome=False)
    open_ = [(job_id, _state(dependencies, job_id)) for job_id in job.after_any
             if _state(dependencies, job_id) not in ENDED]
    if open_:
        return WaitingForJobs(tuple(open_), any_outcome=True)
    if job.begin is not None and now < job.begin:
        return NotBefore(job.begin)
    return None


def eligible_since(job: JobPlacement, dependencies: Mapping[int, JobEnd], queued_since: float) -> float:
    """When the job could first have been placed: its scheduling timeout counts from then."""
    if not job.gated:
        return queued_since
    moments = [queued_since, job.begin or 0.0]
    moments += [dependencies[j].finished_at or 0.0 for j in (*job.after, *job.after_any) if j in dependencies]
    return max(moments)


def _state(dependencies: Mapping[int, JobEnd], job_id: int) -> str:
    end = dependencies.get(job_id)
    return end.state if end is not None else "UNKNOWN"
