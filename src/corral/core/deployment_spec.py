"""The deployment spec a user submits: a task template serving HTTP on $PORT, with replicas and a health check."""

from __future__ import annotations

import re
from functools import partial

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from corral.core import limits
from corral.core.autoscale import Bounds
from corral.core.spec import MAX_TIME_LIMIT, JobSpec, Resources, Seconds, Workdir
from corral.core.spec import NAME as PROJECT_NAME
from corral.core.wire import WireModel, incoming

MAX_DEPLOYMENT_REPLICAS = 1000
NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")


class HealthCheck(WireModel):
    """An HTTP GET a replica must answer with 2xx; `threshold` failures in a row make it UNHEALTHY."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field("/health", max_length=500)
    interval: Seconds = Field(2.0, gt=0, le=3600)
    timeout: Seconds = Field(2.0, gt=0, le=3600)
    threshold: int = Field(3, ge=1, le=1000)
    startup_timeout: Seconds = Field(300.0, gt=0, le=MAX_TIME_LIMIT,
                                     description="how long a new replica may fail its check while it loads")

    @field_validator("path")
    @classmethod
    def _absolute(cls, path: str) -> str:
        if not path.startswith("/"):
            raise ValueError(f"health path must start with '/': {path!r}")
        return path


class DeploymentSpec(WireModel):
    """A served model or service: `command` serves HTTP on $PORT; the router sends it requests."""

    model_config = ConfigDict(extra="forbid")

    name: str
    command: list[str]
    model_names: list[str] = Field(default_factory=list, description="the `model` values routed here")
    env: dict[str, str] = Field(default_factory=dict)
    export: dict[str, str] = Field(default_factory=dict, description="variables copied from the deployer's environment")
    bundle: str | None = None
    workdir: Workdir | None = Field(None, description="where replicas start: the directory it was deployed from")
    pip: list[str] = Field(default_factory=list, description="Python packages its replicas need (as JobSpec.pip)")
    python: str | None = Field(None, description="the Python version of their environment (as JobSpec.python)")
    resources: Resources = Field(default_factory=Resources)
    labels: dict[str, str] = Field(default_factory=dict)
    project: str = Field("default", max_length=100, pattern=f"^{PROJECT_NAME}$",
                         description="whose quota and share its replicas use, and whose tokens may call it")
    min_replicas: int = Field(1, ge=0, le=MAX_DEPLOYMENT_REPLICAS)
    max_replicas: int | None = Field(None, ge=1, le=MAX_DEPLOYMENT_REPLICAS)
    health: HealthCheck = Field(default_factory=HealthCheck)
    idle_timeout: Seconds | None = Field(None, gt=0, le=MAX_TIME_LIMIT,
                                         description="scale to zero after this long without requests")
    priority: int = Field(0, ge=-1000, le=1000, description="queued requests of higher priority go first")
    concurrency: int | None = Field(None, ge=1, le=1_000_000, description="requests in flight before 429")
    min_residency: Seconds = Field(5.0, ge=0, le=MAX_TIME_LIMIT,
                                   description="a loaded deployment is not evicted sooner than this")
    public: bool = Field(False, description="the router serves it without a key")
    preload: bool = Field(False, description="start a replica at once even if min_replicas is 0")
    grace_period: Seconds = Field(15.0, ge=0, le=3600)
    target_concurrency: float = Field(2.0, gt=0, le=1_000_000,
                                      description="requests per replica the autoscaler aims for, in flight or queued")
    scale_down_delay: Seconds = Field(60.0, ge=0, le=MAX_TIME_LIMIT,
                                      description="load must stay lower this long before replicas are removed")

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not NAME.fullmatch(name):
            raise ValueError(f"not a deployment name: {name!r} (lower-case letters, digits, '.', '_', '-'; "
                             "at most 63, starting with a letter or digit)")
        return name

    @field_validator("command")
    @classmethod
    def _command(cls, command: list[str]) -> list[str]:
        if not command or not command[0].strip():
            raise ValueError("command is empty: give the program that serves on $PORT")
        return command

    # Size caps (corral.core.limits); command and env get the job's, through the check in `_consistent`.
    _labels_within_limits = field_validator("labels")(limits.capped(limits.check_labels))
    _model_names_within_limits = field_validator("model_names")(limits.capped(partial(
        limits.check_count, "model names", most=limits.MAX_MODEL_NAMES, longest=limits.MAX_MODEL_NAME)))

    @model_validator(mode="after")
    def _spec_within_limits(self, info: ValidationInfo) -> DeploymentSpec:
        if incoming(info):
            limits.check_spec_size(len(self.model_dump_json()))
        return self

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> DeploymentSpec:
        if self.max_replicas is None:
            self.max_replicas = max(self.min_replicas, 1)
        if self.max_replicas < self.min_replicas:
            raise ValueError(f"max_replicas ({self.max_replicas}) is below min_replicas ({self.min_replicas})")
        if not self.model_names:
            self.model_names = [self.name]
        # the same checks a job gets
        checked = JobSpec.model_validate({"command": self.command, "env": self.env, "export": self.export,
                                          "bundle": self.bundle, "pip": self.pip, "python": self.python},
                                         context=info.context)
        self.pip, self.python = checked.pip, checked.python
        return self

    @property
    def autoscale_bounds(self) -> Bounds:
        return Bounds(self.min_replicas, self.max_replicas, self.target_concurrency, self.scale_down_delay)

    @property
    def initial_replicas(self) -> int:
        """Replicas wanted at creation: the minimum, or one when preloading a scale-to-zero deployment."""
        return max(self.min_replicas, 1 if self.preload else 0)

    def replica_job(self) -> JobSpec:
        """The job one replica runs as: the worker gives it a free $PORT; the deployment replaces it, not retries."""
        return JobSpec(
            name=f"{self.name}.replica", command=self.command, env={**self.env, "CORRAL_DEPLOYMENT": self.name},
            export=self.export, bundle=self.bundle, workdir=self.workdir, pip=self.pip, python=self.python,
            resources=self.resources, labels=self.labels, priority=self.priority, project=self.project,
            max_retries_failure=0, max_retries_preemption=0, grace_period=self.grace_period, allocate_port=True,
        )
