"""The controller's config file as one model: pools, quotas, the cluster's retry default, /metrics, the router,
prices.

Every part of corral reads its settings from `CorralConfig`, parsed once where the file is read
(`corral controller --config`, `corral router --config`) and handed down; this module does no I/O.
A file that does not validate is refused with one `ConfigError` line naming the file and the field.

Pools and quotas are also set through the admin API, and kept in the store; a pool or project
nobody configured gets the defaults: priority order, concentrated placement, preemption on, no
reservation, no quota.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import yaml
from pydantic import BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from corral.core.retry_policy import RetryPolicy
from corral.core.spec import Seconds
from corral.core.spec_text import parse_bytes
from corral.core.wire import WireModel


class ConfigError(ValueError):
    """The config file cannot be read or does not validate; the message is one line naming the file and field."""


class Strategy(StrEnum):
    """Which of the workers that fit a task gets it."""

    CONCENTRATED = "concentrated"  # the fullest that fits: fewest workers used, big holes kept for gangs
    DISPERSED = "dispersed"  # the emptiest: load spread evenly
    ROUND_ROBIN = "round-robin"  # the next in turn
    FRAGMENTATION_AWARE = "fragmentation-aware"  # the one it fragments least against the requests the pool sees


class Sequencer(StrEnum):
    """In which order a pool's pending jobs are offered room."""

    FIFO = "fifo"
    PRIORITY = "priority"  # higher priority first, then submission order
    FAIR_SHARE = "fair-share"  # the project with the smallest dominant share of the pool first (DRF)


def _amount(value: object) -> object:
    """4, "4", "0.5", or a size such as "64G" for memory."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return parse_bytes(value)
    return value


Amount = Annotated[float, BeforeValidator(_amount), Field(ge=0)]


class PoolPolicy(WireModel):
    model_config = ConfigDict(extra="forbid")

    strategy: Strategy | None = Field(
        None, description="which worker that fits gets a task; none: fragmentation-aware where the pool has GPUs, "
                          "concentrated elsewhere")
    sequencer: Sequencer = Sequencer.PRIORITY
    reservation_time: Seconds | None = Field(
        None, ge=0, description="a job waiting longer than this gets room held for it (backfill); none: never")
    max_per_job: dict[str, Amount] = Field(
        default_factory=dict, description="most a job may ask in total, per resource; more is refused at submission")
    preemption: bool = Field(True, description="higher-priority jobs may evict lower ones (priority sequencer)")


class ProjectQuota(WireModel):
    model_config = ConfigDict(extra="forbid")

    limits: dict[str, Amount] = Field(default_factory=dict, description="most the project may hold at once")


class PoolPrices(WireModel):
    """What an hour of each resource costs in one pool; usage in a pool without prices costs nothing."""

    model_config = ConfigDict(extra="forbid")

    cpu_hour: float = Field(0.0, ge=0, allow_inf_nan=False, description="per core-hour")
    gpu_hour: float = Field(0.0, ge=0, allow_inf_nan=False, description="per device-hour (a share: its part)")
    memory_gb_hour: float = Field(0.0, ge=0, allow_inf_nan=False, description="per GiB-hour (2**30 bytes)")
    currency: str = Field("USD", min_length=1, max_length=8)


class MetricsConfig(WireModel):
    model_config = ConfigDict(extra="forbid")

    require_token: bool = False  # /metrics names workers and deployments: a cluster may keep it to admins


class SwapGroup(WireModel):
    """Deployments evicted together: see corral.serving.policies.GroupPolicy."""

    model_config = ConfigDict(extra="forbid")

    members: list[str] = Field(..., min_length=1)
    swap: bool = True  # one member runs at a time
    exclusive: bool = True  # loading a member unloads other groups' members
    persistent: bool = False  # other groups never unload its members


class CostMatrix(WireModel):
    """The sets of deployments allowed to run together, and what evicting each costs (1 when not given)."""

    model_config = ConfigDict(extra="forbid")

    sets: list[list[str]]
    costs: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=dict)


DEFAULT_SWAP_TIMEOUT = 600.0  # seconds a deployment may take to load before its waiting requests fail


class RouterConfig(WireModel):
    """How the router queues and evicts: `max_wait`, `swap_timeout`, and one eviction policy (or fit by placement)."""

    model_config = ConfigDict(extra="forbid")

    max_wait: Seconds = Field(60.0, ge=0, description="no request waits longer while lower-priority ones are served")
    swap_timeout: Seconds = Field(DEFAULT_SWAP_TIMEOUT, gt=0)
    groups: dict[str, SwapGroup] | None = None
    matrix: CostMatrix | None = None

    @model_validator(mode="after")
    def _one_eviction_policy(self) -> RouterConfig:
        if self.groups is not None and self.matrix is not None:
            raise ValueError("give one eviction policy: 'groups' or 'matrix', not both")
        return self


ROUTER_KEYS = frozenset(RouterConfig.model_fields)


class CorralConfig(WireModel):
    """The whole file. A router-only file (its keys at the top level, as `corral router --config` took) reads
    as the same keys under `router:`."""

    model_config = ConfigDict(extra="forbid")

    pools: dict[str, PoolPolicy] = Field(default_factory=dict)
    quotas: dict[str, ProjectQuota] = Field(default_factory=dict)
    retry_policy: RetryPolicy | None = None  # the cluster's default, under the stored one (see retry_defaults)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    router: RouterConfig = Field(default_factory=RouterConfig)
    prices: dict[str, PoolPrices] = Field(default_factory=dict, description="per pool; none: usage has no cost")

    @model_validator(mode="after")
    def _one_currency(self) -> CorralConfig:
        currencies = {prices.currency for prices in self.prices.values()}
        if len(currencies) > 1:
            raise ValueError(f"prices: give every pool the same currency, not {', '.join(sorted(currencies))}")
        return self

    @model_validator(mode="before")
    @classmethod
    def _router_keys_at_the_top(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not ROUTER_KEYS & data.keys():
            return data
        if "router" in data:
            raise ValueError(f"give {', '.join(sorted(ROUTER_KEYS & data.keys()))} under `router:`, "
                             "not beside it")
        top = {k: v for k, v in data.items() if k not in ROUTER_KEYS}
        return {**top, "router": {k: v for k, v in data.items() if k in ROUTER_KEYS}}


def parse_config(text: str, source: str) -> CorralConfig:
    """The config in `text` (YAML, read from `source`), or a ConfigError naming `source` and the field."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"cannot read {source}: {_yaml_problem(error)}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the config must be a mapping of {', '.join(CorralConfig.model_fields)}")
    try:
        return CorralConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(f"{source}: {_problems(error)}") from None


def _yaml_problem(error: yaml.YAMLError) -> str:
    """PyYAML's message on one line: where, and what."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark else problem


def _problems(error: ValidationError) -> str:
    """`pools.a100.strategy: Input should be ...; quotas.x.colour: unknown field`."""
    lines = []
    for problem in error.errors():
        where = ".".join(str(part) for part in problem["loc"])
        text = "unknown field" if problem["type"] == "extra_forbidden" else problem["msg"].removeprefix("Value error, ")
        lines.append(f"{where}: {text}" if where else text)
    return "; ".join(lines)
