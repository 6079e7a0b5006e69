"""Where an attempt starts and the Python environments a worker keeps built: what a worker reports (core.protocol)
and what the views show (core.views), in a module of their own so that the views, which every client command
reads, do not load the worker protocol's models (a twentieth of `corral submit --wait`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from corral.core.spec import AbsolutePath, PythonVersion
from corral.core.wire import MAX_COUNT, WireModel

EnvironmentKey = Annotated[str, Field(pattern=r"^[0-9a-f]{16,64}$")]


class CachedEnvironment(WireModel):
    """One Python environment a worker keeps built, for `corral workers`."""

    model_config = ConfigDict(extra="forbid")

    key: EnvironmentKey
    python: PythonVersion | None = None
    size: int = Field(0, ge=0, le=2**62, description="bytes on disk")
    last_used: float = Field(0.0, ge=0, description="unix time a task last started with it")
    in_use: int = Field(0, ge=0, le=MAX_COUNT, description="attempts using it now")


class AttemptWorld(WireModel):
    """Where an attempt starts and with which Python environment, as its worker made them (with PREPARED)."""

    model_config = ConfigDict(extra="forbid")

    start: Literal["shared", "bundle", "empty"] = Field(
        ..., description="shared: the submission directory itself; bundle: an unpacked copy; empty: a new directory")
    directory: AbsolutePath
    env_key: EnvironmentKey | None = None
    env_seconds: float | None = Field(None, ge=0, le=86400 * 365, description="how long the environment took to build")
    env_cached: bool | None = Field(None, description="the environment was already built on this worker")
