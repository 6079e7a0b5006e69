"""What the API returns: the read models the CLI, the Python client and the dashboard share."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, computed_field

from corral.core.attempt_world import AttemptWorld, CachedEnvironment
from corral.core.relay import ChannelKind
from corral.core.retry_policy import FailureCause, RetryPolicy
from corral.core.spec import JobSpec
from corral.core.states import JobState, TaskState, WorkerState
from corral.core.wire import DeferredModel, WireModel


class AttemptView(DeferredModel):
    attempt: int
    worker_id: str | None
    state: TaskState
    exit_code: int | None
    reason: str | None
    assigned_at: float | None
    started_at: float | None
    finished_at: float | None
    refunded: bool = False  # a gang sibling stopped by a drain: this attempt cost no budget
    world: AttemptWorld | None = None  # where it started and with which Python environment (from PREPARED on)


class TaskView(DeferredModel):
    id: int
    index: int
    state: TaskState
    attempt: int
    worker_id: str | None
    gpu_ids: list[int]
    failures: int
    preemptions: int
    exit_code: int | None
    reason: str | None
    state_since: float
    attempts: list[AttemptView] = []
    preempt_epoch: int | None = None  # the epoch of its last preemption order
    checkpoint_epoch: int | None = None  # its newest checkpoint was saved in this epoch
    checkpoint_size: int | None = None


class StartEstimate(DeferredModel):
    """When a pending job is expected to start (corral.engine.estimates), and what that rests on."""

    text: str  # as the START column says it, when the view was made: "now", "~4m", "~2h after job 41", "unknown: ..."
    start_at: float | None  # None: unknown
    all_started_at: float | None = None  # when its last pending task is expected to start
    after_job: int | None = None  # the job whose end frees its room, or which it waits for
    basis: str = ""  # how the running tasks' ends were known
    unknown: str | None = None  # why no start is known
    never: bool = False
    made_at: float = 0.0  # when it last moved


class EstimateAccuracy(WireModel):
    horizon: str  # how long before the start the estimates were made: "under 1 min", "1-10 min", ...
    count: int
    median_error: float  # seconds between the estimate and the start
    p90_error: float
    median_relative: float  # the error over the wait it estimated


class EstimateStats(WireModel):
    days: float
    count: int  # estimates held to account
    horizons: list[EstimateAccuracy]


class JobView(DeferredModel):
    id: int
    name: str
    state: JobState
    gang: bool
    priority: int
    replicas: int
    spec: JobSpec
    pending_reason: str | None
    created_at: float
    state_since: float
    finished_at: float | None
    task_counts: dict[TaskState, int]
    idempotency_key: str | None = None
    preemption_epoch: int = 0
    drain_trigger: int | None = None  # the index of the task whose end started the last gang drain
    launched_by: int | None = None  # the job whose task submitted this one
    owner: str = "admin"  # the user who submitted it (a launched job: its launcher's owner)
    # The retry chain (core/retries.py); a job without a retry policy keeps the defaults.
    parent_job_id: int | None = None
    retry_count: int = 0
    max_retries: int = 0
    retry_policy: RetryPolicy | None = None
    retry_cause: FailureCause | None = None
    retry_state: str | None = None
    retry_due_at: float | None = None
    retry_chain: list[int] = []
    estimate: StartEstimate | None = None  # a pending job's, once the estimator has made one


class RetryAttemptView(DeferredModel):
    """One job of a retry chain, as GET /jobs/{id}/attempts lists it."""

    id: int
    retry_count: int
    state: JobState
    retry_cause: FailureCause | None
    retry_state: str | None
    created_at: float
    finished_at: float | None


class JobPage(DeferredModel):
    items: list[JobView]
    next_cursor: int | None
    total: int | None = None  # how many jobs match, when asked for


class HistoryEntry(DeferredModel):
    at: float
    job_id: int
    task_id: int | None
    task_index: int | None
    attempt: int | None
    handler: str
    result: str
    from_state: str | None
    to_state: str | None
    message: str | None
    repeats: int = Field(1, description="a wait (SKIPPED) seen again with the same reason counts here")
    last_at: float | None = Field(None, description="when a repeated wait was last seen")


AttachmentState = Literal["opening", "open", "closed", "failed"]


class AttachmentView(DeferredModel):
    """A channel a client opened into a task through the controller's relay (corral.core.relay)."""

    id: int
    job_id: int
    task_index: int
    attempt: int
    worker_id: str
    kind: ChannelKind
    detail: dict = Field(..., description="what was asked: command, tty, detach, port, watch, rows, cols")
    actor: str = Field(..., description='who: "admin", or "job N" for the token of job N')
    address: str | None = Field(None, description="the client's address, as the controller saw it")
    state: AttachmentState = Field(..., description="opening: waiting for the worker to dial back")
    opened_at: float
    connected_at: float | None
    closed_at: float | None
    close_code: int | None
    close_reason: str | None


class TicketView(DeferredModel):
    """A single-use ticket that opens one channel into a job (`?ticket=`), for a browser's WebSocket."""

    ticket: str
    expires_in: int = Field(..., description="seconds it stays valid")


class DeviceTask(DeferredModel):
    """A task holding (part of) one GPU."""

    task_id: int
    job_id: int
    index: int
    share: float = Field(..., description="of this device: 1.0 for a task holding whole devices")


class DeviceView(DeferredModel):
    """One GPU of a worker: what it is, what corral has booked on it, and what NVML last read of its use."""

    index: int
    model: str = ""
    memory: int = Field(0, description="bytes; 0 when unknown")
    booked: float = Field(0.0, description="the share booked: running shares summed, 1.0 under a whole-device task")
    memory_reserved: int = Field(0, description="bytes its shares reserve (their gpu_memory)")
    tasks: list[DeviceTask] = []
    memory_used: int | None = Field(None, description="bytes in use, by any process, at the worker's last reading")
    utilization: int | None = Field(None, description="percent busy at the worker's last reading")


class WorkerView(DeferredModel):
    id: str
    name: str
    address: str
    state: WorkerState
    labels: dict[str, str]
    capacity: dict[str, float]
    used: dict[str, float]
    gpu_names: list[str]
    last_heartbeat: float
    registered_at: float
    running_tasks: int
    pool: str = "default"
    gpus: list[dict] = []  # per device: index, model, memory, uuid
    devices: list[DeviceView] = []  # per device: what is booked on it and its use
    pythons: list[str] = []  # the Python versions it builds environments with
    environments: list[CachedEnvironment] = []  # the Python environments it keeps built
    filesystem: str | None = None  # the id of the file system its tasks see (corral.filesystem)
    shared_fs: list[str] = []  # directories it shares with submitters on other machines (--shared-fs)
    run_as_owners: bool = False  # it runs as root: tasks run as their owners' local accounts, where they have one
    account: str | None = None  # the local account it runs as (and its tasks, unless run as their owners)


class WorkdirSharing(DeferredModel):
    """How many alive workers of a pool share a submission directory: its files are uploaded unless all do."""

    alive: int
    sharing: int

    @computed_field  # sent too, so a client that reads the JSON alone need not know the rule
    @property
    def upload_needed(self) -> bool:
        """A worker that does not share it may take the job, or none is alive to judge by."""
        return self.alive == 0 or self.sharing < self.alive


class EventView(DeferredModel):
    """One entry of the event stream: a history row, typed (see corral.core.events)."""

    id: int
    type: str
    at: float
    job_id: int | None
    task_id: int | None
    task_index: int | None
    attempt: int | None
    worker_id: str | None
    deployment_id: int | None = None
    deployment: str | None = None  # the deployment's name
    replica_id: int | None = None
    handler: str
    result: str
    from_state: str | None
    to_state: str | None
    message: str | None


class WorkerFit(DeferredModel):
    worker_id: str
    name: str
    fits: bool
    why: str


class PlacementAnalysis(DeferredModel):
    """Why a job is where it is, worker by worker, on the cluster as it is now."""

    job_id: int
    state: str
    pool: str
    project: str
    priority: int
    pending_reason: str | None
    gate: str | None  # a dependency or begin time it waits for
    quota: dict[str, tuple[float, float]]  # resource -> (used, limit) for its project
    workers: list[WorkerFit]


class TokenRequest(WireModel):
    token: str | None = Field(None, min_length=16, max_length=200, pattern=r"^[!-~]+$",
                              description="the token to accept (printable, no spaces); by default a random one")


class ProjectToken(DeferredModel):
    id: int
    project: str
    created_at: float


class IssuedToken(ProjectToken):
    token: str = Field(..., description="shown this once: only its hash is kept")


class AuditEntry(DeferredModel):
    """One row of the audit log: an API call (role, object, address and outcome set), or the controller's own."""

    id: int
    at: float
    actor: str = Field(..., description="the caller's name; anonymous for a call refused before it said who")
    role: str | None
    action: str = Field(..., description="what was done, e.g. job.cancel, quota.set, token.create")
    object: str | None = Field(..., description="what it was done to, e.g. 'job 12', 'project vision'")
    job_id: int | None
    address: str | None
    outcome: int | None = Field(..., description="the HTTP status answered (101: a channel opened)")
    detail: dict


class ControllerView(DeferredModel):
    """A controller serving the store (GET /api/v1/controllers): live, or silent for 10 s (gone)."""

    id: str  # host:pid:start
    url: str
    state: Literal["live", "gone"]
    host: str
    pid: int
    version: str
    started_at: float
    seen_at: float
    last_pass_at: float | None
    handlers: dict[str, float]  # handler name -> when this controller last ran it
    this: bool  # the controller that answered
