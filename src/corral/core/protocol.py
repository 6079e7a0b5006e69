"""What a worker and the controller say to each other, over the worker's outbound HTTP only.

The worker registers once, then heartbeats. A heartbeat carries the worker's reports (task
state changes, in the order they happened) and may wait (long-poll) for up to `wait`
seconds until the controller has orders for it. Orders are derived from the stored state
on every reply, so they repeat until the worker's reports show them done: the worker acts
on each (task, attempt, action) once.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from corral.core import limits
from corral.core.attempt_world import AttemptWorld, CachedEnvironment
from corral.core.relay import MAX_COLS, MAX_ROWS, ChannelKind
from corral.core.spec import (
    MAX_CPU,
    MAX_GPU,
    MAX_MEMORY,
    NAME,
    AbsolutePath,
    FilesystemId,
    PythonVersion,
    Workdir,
)
from corral.core.spec_text import MAX_CUSTOM_AMOUNT
from corral.core.states import TaskState
from corral.core.wire import MAX_COUNT, Count, DeferredModel, Id, WireModel, storable

API = "/api/v1"

# What one machine can have, so that a registration costs the controller no more than a real machine would.
MAX_CUSTOM_SLOTS = 64
MAX_REPORTS = 10_000
MAX_REASON = 2000
ExitCode = Annotated[int, Field(ge=-MAX_COUNT - 1, le=MAX_COUNT)]
Label = Annotated[str, Field(max_length=200)]


def _told(data: object) -> object:
    """A worker's reason is told, never refused: made storable and cut to MAX_REASON, so that a report about
    a task whose error message holds a NUL, a lone surrogate or a 10 MB argument still goes through."""
    if isinstance(data, dict) and isinstance(data.get("reason"), str):
        return {**data, "reason": storable(data["reason"])[:MAX_REASON]}
    return data


class Capacity(WireModel):
    model_config = ConfigDict(extra="forbid")

    cpu: float = Field(..., ge=0, le=MAX_CPU)
    memory: int = Field(..., ge=0, le=MAX_MEMORY)
    gpu: int = Field(0, ge=0, le=MAX_GPU)
    custom: dict[Annotated[str, Field(max_length=100, pattern=f"^{NAME}$")],
                 Annotated[float, Field(ge=0, le=MAX_CUSTOM_AMOUNT)]] = Field(
        default_factory=dict, max_length=MAX_CUSTOM_SLOTS, description="custom resource slots by name")


class GpuDevice(WireModel):
    """One GPU as NVML describes it; tasks get whole devices by index (CUDA_VISIBLE_DEVICES)."""

    index: int = Field(..., ge=0, lt=MAX_GPU)
    model: str = Field(..., max_length=200)
    memory: int = Field(0, ge=0, le=MAX_MEMORY, description="bytes")
    uuid: str = Field("", max_length=200)


class GpuUse(WireModel):
    """One device's use as NVML reads it at a heartbeat: the memory its processes hold (corral's or not) and how
    busy it is. Nothing enforces a share's part of a device: this is how a user sees what the shares really use."""

    model_config = ConfigDict(extra="forbid")

    index: int = Field(..., ge=0, lt=MAX_GPU)
    memory_used: int = Field(..., ge=0, le=MAX_MEMORY, description="bytes")
    memory_total: int = Field(..., ge=0, le=MAX_MEMORY, description="bytes")
    utilization: int | None = Field(None, ge=0, le=100, description="percent of the last sample period busy")

    @model_validator(mode="after")
    def _used_within_total(self) -> GpuUse:
        if self.memory_used > self.memory_total:
            raise ValueError(f"device {self.index}: {self.memory_used} bytes used of {self.memory_total}")
        return self


MAX_SHARED_FS = 64
MAX_PYTHONS = 32
MAX_ENVIRONMENTS = 10_000


class RegisterRequest(WireModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., min_length=1, max_length=200)
    address: str = Field(..., min_length=1, max_length=limits.MAX_ADDRESS,
                         description="where gang peers reach this machine")
    capacity: Capacity
    gpu_names: list[Label] = Field(default_factory=list, max_length=MAX_GPU)
    # Counts and lengths are the caps every spec's labels have (corral.core.limits.check_labels, below).
    labels: dict[Annotated[str, Field(min_length=1)], str] = Field(default_factory=dict)
    pool: str = Field("default", min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
    gpus: list[GpuDevice] = Field(default_factory=list, max_length=MAX_GPU)
    # Tasks the worker still runs from before (a re-registration after a controller restart).
    running: list[TaskRef] = Field(default_factory=list, max_length=MAX_REPORTS)
    filesystem: FilesystemId | None = Field(None, description="the id of the file system its tasks see")
    shared_fs: list[AbsolutePath] = Field(default_factory=list, max_length=MAX_SHARED_FS,
                                          description="directories it shares with submitters elsewhere")
    pythons: list[PythonVersion] = Field(default_factory=list, max_length=MAX_PYTHONS,
                                         description="Python versions it can build environments with")
    environments: list[CachedEnvironment] = Field(default_factory=list, max_length=MAX_ENVIRONMENTS)
    run_as_owners: bool = Field(False, description="it runs as root: a task runs as its owner's local account "
                                                   "(BuildOrder.run_as), where that names one")
    account: str | None = Field(None, max_length=64, description="the local account the worker runs as")

    _labels_within_limits = field_validator("labels")(limits.capped(limits.check_labels))


class RegisterReply(DeferredModel):
    worker_id: str
    heartbeat_interval: float


class TaskRef(WireModel):
    task_id: Id
    attempt: Count


class TaskReport(WireModel):
    """One state change of one attempt, as the worker saw it."""

    model_config = ConfigDict(extra="forbid")

    task_id: Id
    attempt: Count
    state: TaskState
    exit_code: ExitCode | None = None
    reason: str | None = Field(None, max_length=MAX_REASON)
    at: float = Field(..., description="unix time on the worker")
    epoch: Count | None = Field(None, description="PREEMPTED only: the epoch of the preemption order it obeyed")
    oom_killed: bool = Field(False, description="the process was killed for memory (the worker's cgroup says so)")
    port: int | None = Field(None, ge=0, le=65535, description="the $PORT the worker gave the process (with RUNNING)")
    world: AttemptWorld | None = Field(None, description="PREPARED only: where it starts, with which environment")

    @model_validator(mode="before")
    @classmethod
    def _readable_reason(cls, data: object) -> object:
        return _told(data)


class HeartbeatRequest(WireModel):
    model_config = ConfigDict(extra="forbid")

    reports: list[TaskReport] = Field(default_factory=list, max_length=MAX_REPORTS)
    environments: list[CachedEnvironment] | None = Field(
        None, max_length=MAX_ENVIRONMENTS, description="the worker's cached environments, when they changed")
    pythons: list[PythonVersion] | None = Field(
        None, max_length=MAX_PYTHONS, description="the Python versions it builds environments with, once found")
    gpus: list[GpuUse] | None = Field(None, max_length=MAX_GPU,
                                      description="each NVIDIA device's use, where NVML reads it")
    wait: float = Field(0.0, ge=0, le=60, description="long-poll: seconds to wait for orders")
    holding: list[tuple[Id, Count]] = Field(
        default_factory=list, max_length=MAX_REPORTS,
        description="the attempts the worker holds, (task id, attempt), their build orders taken: the reply does "
                    "not build them again (pairs, not objects: a model each cost the heartbeat 30 µs)")

    @model_validator(mode="before")
    @classmethod
    def _readable_reasons(cls, data: object) -> object:
        """Each report's reason is told (`_told`) before the body's strings are checked: that check walks the raw
        body, the reports in it too, before a report's own validator runs, and would refuse the whole heartbeat."""
        if isinstance(data, dict) and isinstance(reports := data.get("reports"), list):
            return {**data, "reports": [_told(report) for report in reports]}
        return data

    @property
    def only_liveness(self) -> bool:
        """It says only that the worker lives: no report, none of the facts it sends when they change."""
        return not self.reports and self.environments is None and self.pythons is None and not self.gpus

    @field_validator("gpus")
    @classmethod
    def _one_reading_per_device(cls, gpus: list[GpuUse] | None) -> list[GpuUse] | None:
        indices = [gpu.index for gpu in gpus or ()]
        if len(set(indices)) < len(indices):
            raise ValueError("one reading per device: an index appears twice")
        return gpus


class BuildOrder(DeferredModel):
    """Prepare an attempt: make its directory, fetch and unpack its bundle. A gang member's start comes later, in a
    StartOrder to every member at once; an independent task (`start`) starts as soon as it is prepared.

    `env` is complete as the controller composed it (the job's variables, CORRAL_* and, for
    gangs, the rendezvous variables); the worker adds only what is its own to know
    (CUDA_VISIBLE_DEVICES from `gpu_ids`; with a share of one device, CORRAL_GPU_SHARE and, where an
    MPS control daemon runs, its limits).
    """

    action: Literal["build"] = "build"
    task_id: int
    attempt: int
    job_id: int
    task_index: int
    command: list[str]
    env: dict[str, str]
    bundle: str | None = None
    workdir: Workdir | None = Field(None, description="the submission directory: run there if this worker shares it")
    pip: list[str] = Field(default_factory=list, description="the job's Python requirements (JobSpec.pip)")
    python: str | None = Field(None, description="the Python version its environment is built with")
    gpu_ids: list[int] = Field(default_factory=list)
    gpu_share: float | None = Field(None, gt=0, lt=1, description="the share of its one device (gpu_ids), if shared")
    gpu_memory: int | None = Field(None, gt=0, le=MAX_MEMORY,
                                   description="with a share: the bytes of its device the share reserves")
    time_limit: float | None = None
    grace_period: float = 15.0
    checkpoint: bool = Field(False, description="the controller holds a checkpoint from an earlier attempt")
    allocate_port: bool = False  # give the process a free port as $PORT, reported with RUNNING
    start: bool = Field(False, description="start as soon as it is prepared, with no start order to wait for")
    interactive: bool = Field(False, description="run on a terminal (a PTY) that clients attach to (corral.core.relay)")
    run_as: str | None = Field(None, max_length=32, pattern=r"^[a-z_][a-z0-9_.\-]*\$?$",
                               description="the local account its processes run as, where the worker runs as root "
                                           "(the owner's unix_user); else the worker's own")
    idle_timeout: float | None = Field(None, gt=0, description="interactive: end once no client was attached this long")


class StartOrder(DeferredModel):
    action: Literal["start"] = "start"
    task_id: int
    attempt: int


class StopOrder(DeferredModel):
    """Stop for good: SIGTERM to the process group, the grace period, then SIGKILL; report KILLED."""

    action: Literal["stop"] = "stop"
    task_id: int
    attempt: int
    grace_period: float = 15.0
    reason: str = "cancelled"


class PreemptOrder(DeferredModel):
    """Stop this attempt to come back later: SIGTERM to the process group, the grace period, then
    SIGKILL; upload the checkpoint the task left at CORRAL_CHECKPOINT_PATH; acknowledge with `epoch`."""

    action: Literal["preempt"] = "preempt"
    task_id: int
    attempt: int
    epoch: int
    grace_period: float = 15.0


class PreemptedAck(WireModel):
    """A worker's acknowledgement that a preempted attempt's processes are gone."""

    model_config = ConfigDict(extra="forbid")

    attempt: Count
    epoch: int = Field(..., ge=1, le=MAX_COUNT)
    exit_code: ExitCode | None = None
    reason: str | None = Field(None, max_length=MAX_REASON)

    @model_validator(mode="before")
    @classmethod
    def _readable_reason(cls, data: object) -> object:
        return _told(data)


class RelayOrder(DeferredModel):
    """Dial back to the controller for one channel a client opened into this attempt (corral.core.relay): a
    WebSocket to `url` (this worker's controller when None) + /api/v1/relay/{session}. Repeated until the worker
    has dialed; the worker acts on each session once."""

    action: Literal["relay"] = "relay"
    session: str = Field(..., pattern=r"^[A-Za-z0-9_\-]{16,128}$")
    task_id: int
    attempt: int
    kind: ChannelKind
    watch: bool = Field(False, description="terminal: the client only watches; its keys never reach the terminal")
    command: list[str] = Field(default_factory=list, description="exec: the argv to run in the task's environment")
    tty: bool = Field(False, description="exec: run it on a terminal of its own")
    detach: bool = Field(False, description="exec: start it and let go; its output goes to the task's logs")
    port: int | None = Field(None, ge=1, le=65535, description="port: the port a process of the attempt listens on")
    rows: int | None = Field(None, ge=1, le=MAX_ROWS)
    cols: int | None = Field(None, ge=1, le=MAX_COLS)
    url: str | None = Field(None, description="the controller that holds the client's end, when not this one")


Order = Annotated[BuildOrder | StartOrder | StopOrder | PreemptOrder | RelayOrder, Field(discriminator="action")]


class HeartbeatReply(DeferredModel):
    orders: list[Order] = Field(default_factory=list)
    heartbeat_interval: float



RegisterRequest.model_rebuild()
