"""The job spec a user submits, validated with messages that name the field at fault."""

from __future__ import annotations

import re
import time
from datetime import datetime
from functools import partial
from typing import Annotated

from pydantic import BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from corral.core import limits
from corral.core.constraints import parse_constraint
from corral.core.pip import check_items, check_python
from corral.core.retry_policy import RetryPolicy
from corral.core.spec_text import (
    FILESYSTEM_ID,
    MAX_BATCH,
    MAX_CUSTOM_AMOUNT,
    parse_bytes,
    parse_duration,
    parse_gpus,
)
from corral.core.webhooks import MAX_URL_LENGTH, check_url
from corral.core.wire import Id, WireModel, incoming

MIN_CPU = 0.01  # a task is a process: it needs some CPU, and a zero reservation would pack workers without end
MAX_CPU = 4096.0
MAX_MEMORY = 64 * 2**40  # 64 TiB
MAX_GPU = 256
MAX_REPLICAS = 10_000
MAX_TIME_LIMIT = 365 * 86400.0
EARLIEST_BEGIN = 946684800.0  # 2000-01-01 UTC
MAX_BEGIN_AHEAD = 5 * 365 * 86400.0  # a begin time at most this far ahead of its submission
DEFAULT_IDLE_TIMEOUT = 3600.0  # an interactive job with no client attached this long ends

# Named priority bands; any integer in [-1000, 1000] is allowed too.
PRIORITY_BANDS = {"low": -100, "normal": 0, "high": 100, "critical": 1000}
NAME = r"[A-Za-z0-9][A-Za-z0-9_.\-]*"
BUILTIN_RESOURCES = ("cpu", "memory", "gpu")


def parse_priority(value: object) -> object:
    """Accept an integer, or a band name: low, normal, high, critical."""
    if not isinstance(value, str):
        return value
    if value.strip().lower() in PRIORITY_BANDS:
        return PRIORITY_BANDS[value.strip().lower()]
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"not a priority: {value!r} (use an integer or one of {', '.join(PRIORITY_BANDS)})") from None


def parse_time(value: object) -> object:
    """Accept unix seconds or an ISO 8601 time (without a zone: local time)."""
    if not isinstance(value, str):
        return value
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(value.strip()).timestamp()
    except ValueError:
        raise ValueError(f"not a time: {value!r} (use unix seconds or ISO 8601, e.g. 2026-01-31T08:00)") from None


def parse_moment(value: str, now: float) -> float:
    """Unix seconds, an ISO 8601 time, or a duration with its unit meaning that long before `now` ("30d", "12h"):
    what --since and --until take."""
    text = value.strip()
    if re.fullmatch(r"[0-9]*\.?[0-9]+\s*[smhd]", text.lower()):
        return now - float(parse_duration(text))
    return float(parse_time(text))


def begin_problem(begin: float | None, now: float) -> str | None:
    """Why `begin` cannot be accepted at a submission at `now`, or None. Judged at submission only: a stored job's
    begin time is not judged again as time passes."""
    if begin is None or EARLIEST_BEGIN <= begin <= now + MAX_BEGIN_AHEAD:
        return None
    latest = time.strftime("%Y-%m-%d", time.gmtime(now + MAX_BEGIN_AHEAD))
    return f"must lie between 2000-01-01 and five years from now ({latest}), not {begin:g}"


Bytes = Annotated[int, BeforeValidator(parse_bytes)]
GpuCount = Annotated[int | float, BeforeValidator(parse_gpus)]
Seconds = Annotated[float, BeforeValidator(parse_duration)]
FilesystemId = Annotated[str, Field(pattern=FILESYSTEM_ID)]
PythonVersion = Annotated[str, Field(pattern=r"^[0-9]{1,2}\.[0-9]{1,3}(\.[0-9]{1,3})?$")]
AbsolutePath = Annotated[str, Field(min_length=1, max_length=limits.MAX_PATH, pattern=r"^/")]
Priority = Annotated[int, BeforeValidator(parse_priority)]
Timestamp = Annotated[float, BeforeValidator(parse_time)]


class Resources(WireModel):
    """What one task reserves on its worker."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: float = Field(1.0, ge=MIN_CPU, le=MAX_CPU, description="cores, fractional, at least 0.01")
    memory: Bytes = Field(0, ge=0, le=MAX_MEMORY, description="bytes")
    gpu: GpuCount = Field(0, ge=0, le=MAX_GPU, description="whole devices, or a share of one device from 0.01 to 0.99")
    gpu_memory: Bytes | None = Field(None, gt=0, le=MAX_MEMORY,
                                     description="bytes each of its GPUs must have at least; any GPU when unset. "
                                                 "With a share: the bytes of its device the share reserves")
    custom: dict[str, float] = Field(default_factory=dict, description="custom slots by name, e.g. {tpu: 4}")

    @field_validator("custom")
    @classmethod
    def _custom_names(cls, custom: dict[str, float]) -> dict[str, float]:
        for name, amount in custom.items():
            if not re.fullmatch(NAME, name) or name in BUILTIN_RESOURCES:
                raise ValueError(f"not a custom resource name: {name!r} (cpu, memory and gpu have their own fields)")
            if not 0 <= amount <= MAX_CUSTOM_AMOUNT:
                raise ValueError(f"custom resource {name} must be from 0 to {MAX_CUSTOM_AMOUNT:g}")
        return custom

    _custom_within_limits = field_validator("custom")(limits.capped(partial(
        limits.check_count, "custom resources", most=limits.MAX_CUSTOM_RESOURCES, longest=limits.MAX_RESOURCE_NAME)))

    @model_validator(mode="after")
    def _gpu_memory_needs_gpus(self) -> Resources:
        if self.gpu_memory is not None and not self.gpu:
            raise ValueError("gpu_memory is the memory each requested GPU (or share) must have: ask for a gpu with it")
        return self


class Workdir(WireModel):
    """The directory a job was submitted from (or named with --workdir), as its submitter's machine sees it.

    A worker that shares that file system runs the tasks in this directory itself; any other runs them in
    an unpacked copy (the job's bundle), and a job without one is placed only on workers that share it.
    """

    model_config = ConfigDict(extra="forbid")

    path: AbsolutePath
    filesystem: FilesystemId = Field(..., description="the id of the submitter's file system (corral.filesystem)")


class JobSpec(WireModel):
    """A job as submitted: one command run by `replicas` tasks, independently or as a gang."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, max_length=200)
    command: list[str] = Field(..., description="argv of each task's process")
    env: dict[str, str] = Field(default_factory=dict)
    bundle: str | None = Field(None, description="sha256 of the uploaded working directory archive")
    workdir: Workdir | None = Field(None, description="where the tasks start: the submission directory")
    export: dict[str, str] = Field(default_factory=dict,
                                   description="variables copied from the submitter's environment, under env")
    pip: list[str] = Field(default_factory=list, description="Python requirements the tasks' environment needs")
    python: PythonVersion | None = Field(None, description="the Python version to build that environment with")
    resources: Resources = Field(default_factory=Resources)
    replicas: int = Field(1, ge=1, le=MAX_REPLICAS)
    gang: bool = False
    priority: Priority = Field(0, ge=-1000, le=1000, description="an integer or low, normal, high, critical")
    max_retries_failure: int = Field(0, ge=0, le=1000)
    max_retries_preemption: int = Field(100, ge=0, le=10_000)
    max_task_failures: int = Field(0, ge=0)
    time_limit: Seconds | None = Field(None, gt=0, le=MAX_TIME_LIMIT)
    scheduling_timeout: Seconds | None = Field(None, gt=0, le=MAX_TIME_LIMIT)
    grace_period: Seconds = Field(15.0, ge=0, le=3600)
    labels: dict[str, str] = Field(default_factory=dict)
    pool: str = Field("default", max_length=100, pattern=f"^{NAME}$", description="the resource group to run in")
    project: str = Field("default", max_length=100, pattern=f"^{NAME}$", description="whose quota and share")
    constraints: list[str] = Field(default_factory=list, description="on worker labels: K=V, K!=V, 'K in A,B'")
    spread: bool = Field(False, description="at most one task of this job per worker")
    max_running: int | None = Field(None, ge=1, le=MAX_REPLICAS,
                                    description="at most this many of its tasks hold room at once (not for a gang)")
    after: list[Id] = Field(default_factory=list, description="start only once these jobs SUCCEEDED")
    after_any: list[Id] = Field(default_factory=list, description="start only once these jobs ended")
    begin: Timestamp | None = Field(None, description="not before this time (unix seconds)")
    retry_policy: RetryPolicy | None = Field(None, description="re-create the job when it fails (batch jobs)")
    allocate_port: bool = Field(False, description="the worker picks a free port, passes it as $PORT and reports it")
    interactive: bool = Field(False, description="each task runs on a terminal (a PTY) that clients attach to; "
                                                 "never retried")
    idle_timeout: Seconds | None = Field(None, gt=0, le=MAX_TIME_LIMIT,
                                         description="interactive only: end once no client was attached this long "
                                                     f"(default {DEFAULT_IDLE_TIMEOUT:g} s)")
    notify: str | None = Field(None, max_length=MAX_URL_LENGTH,
                               description="an http(s) URL POSTed when the job starts, ends or its estimated start "
                                           "moves; 'none': not even the project's default")

    @field_validator("command")
    @classmethod
    def _command_not_empty(cls, command: list[str]) -> list[str]:
        if not command or not command[0].strip():
            raise ValueError("command is empty: give the program to run")
        return command

    @field_validator("notify")
    @classmethod
    def _notify_url(cls, url: str | None) -> str | None:
        return None if url is None else check_url(url)

    @field_validator("env", "export")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        for key in env:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"not an environment variable name: {key!r}")
        return env

    @field_validator("pip", mode="before")
    @classmethod
    def _pip_items(cls, items: object, info: ValidationInfo) -> object:
        if isinstance(items, list) and all(isinstance(item, str) for item in items) and incoming(info):
            return check_items(items)
        return items

    @field_validator("python", mode="before")
    @classmethod
    def _python_version(cls, version: object, info: ValidationInfo) -> object:
        if isinstance(version, str) and incoming(info):
            return check_python(version)
        return version

    @field_validator("constraints")
    @classmethod
    def _constraints(cls, constraints: list[str]) -> list[str]:
        return [str(parse_constraint(text)) for text in constraints]

    @field_validator("after", "after_any")
    @classmethod
    def _job_ids(cls, ids: list[int]) -> list[int]:
        return sorted(set(ids))

    @field_validator("bundle")
    @classmethod
    def _bundle_digest(cls, bundle: str | None) -> str | None:
        if bundle is not None and not re.fullmatch(r"[0-9a-f]{64}", bundle):
            raise ValueError("bundle must be the sha256 hex digest of an uploaded archive")
        return bundle

    # Size caps (corral.core.limits): each field, then the whole spec.
    _command_within_limits = field_validator("command")(limits.capped(limits.check_command))
    _env_within_limits = field_validator("env", "export")(limits.capped(limits.check_env))
    _labels_within_limits = field_validator("labels")(limits.capped(limits.check_labels))

    @field_validator("constraints", mode="before")
    @classmethod
    def _constraints_within_limits(cls, constraints: object, info: ValidationInfo) -> object:
        if isinstance(constraints, list) and incoming(info):  # before parsing each one
            limits.check_count("constraints", constraints, limits.MAX_CONSTRAINTS, limits.MAX_CONSTRAINT)
        return constraints

    @field_validator("after", "after_any", mode="before")
    @classmethod
    def _dependencies_within_limits(cls, ids: object, info: ValidationInfo) -> object:
        if isinstance(ids, list) and incoming(info):
            limits.check_count("job ids", ids, limits.MAX_DEPENDENCIES)
        return ids

    @model_validator(mode="after")
    def _consistent(self) -> JobSpec:
        if self.max_task_failures >= self.replicas and self.max_task_failures:
            raise ValueError(
                f"max_task_failures ({self.max_task_failures}) must be below replicas ({self.replicas})"
            )
        if self.gang and self.max_running is not None:
            raise ValueError("max_running is for independent tasks: a gang's tasks all run at once")
        if self.name is None:
            self.name = self.command[0].rsplit("/", 1)[-1][:200]
        return self

    @model_validator(mode="after")
    def _interactive_never_retried(self) -> JobSpec:
        """A terminal someone typed into cannot be replayed elsewhere: an interactive job runs once. Its preemption
        budget defaults to none; asking for retries of one is refused rather than quietly ignored."""
        if not self.interactive:
            if self.idle_timeout is not None:
                raise ValueError("idle_timeout is for interactive jobs (corral shell): a batch job has time_limit")
            return self
        if self.retry_policy is not None or self.max_retries_failure:
            raise ValueError("an interactive job is never retried: drop retry_policy and max_retries_failure")
        if "max_retries_preemption" not in self.model_fields_set:
            self.max_retries_preemption = 0
        elif self.max_retries_preemption:
            raise ValueError("an interactive job is never retried: max_retries_preemption must be 0")
        if self.idle_timeout is None:
            self.idle_timeout = DEFAULT_IDLE_TIMEOUT
        return self

    @model_validator(mode="after")
    def _spec_within_limits(self, info: ValidationInfo) -> JobSpec:
        if incoming(info):
            limits.check_spec_size(len(self.model_dump_json()))
        return self


IdempotencyKey = Annotated[str, Field(min_length=1, max_length=200)]


class JobBatch(WireModel):
    """Many jobs in one call, each as if submitted alone: all valid, or none stored."""

    model_config = ConfigDict(extra="forbid")

    jobs: list[JobSpec] = Field(..., min_length=1, max_length=MAX_BATCH)
    idempotency_keys: list[IdempotencyKey | None] | None = Field(
        None, description="one per job (null: none), as the Idempotency-Key header of a single submission")

    @model_validator(mode="after")
    def _keys_match_jobs(self) -> JobBatch:
        if self.idempotency_keys is None:
            return self
        if len(self.idempotency_keys) != len(self.jobs):
            raise ValueError(f"idempotency_keys has {len(self.idempotency_keys)} entries for {len(self.jobs)} jobs: "
                             "give one per job (null for none)")
        given = [key for key in self.idempotency_keys if key is not None]
        if len(set(given)) != len(given):
            raise ValueError("idempotency_keys repeat a key: each job needs its own")
        return self

    def keys(self) -> list[str | None]:
        return list(self.idempotency_keys or [None] * len(self.jobs))
