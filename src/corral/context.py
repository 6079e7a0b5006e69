"""`corral.current()`: what code running inside a task knows of itself, and a client to reach its job."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from corral.client.aio import AsyncClient
    from corral.client.http import Client


@dataclass(frozen=True)
class TaskContext:
    """The task's job, index, count and attempt, from the variables its worker set.

    `client` (and `async_client()`) carry the job's own token: they read, cancel and submit
    within the job's launch tree, and what they submit is recorded as launched by this job.
    """

    job_id: int
    task_index: int
    num_tasks: int
    attempt: int
    url: str = field(repr=False)
    token: str = field(repr=False)

    @cached_property
    def client(self) -> Client:
        from corral.client.http import Client

        return Client(self.url, self.token)

    def async_client(self) -> AsyncClient:
        """A new AsyncClient for this job (one per event loop; close it when done)."""
        from corral.client.aio import AsyncClient

        return AsyncClient(self.url, self.token)


def current(env: Mapping[str, str] | None = None) -> TaskContext:
    """The task this code runs in; RuntimeError outside a corral task."""
    env = os.environ if env is None else env
    missing = [name for name in ("CORRAL_JOB_ID", "CORRAL_TASK_INDEX", "CORRAL_NUM_TASKS", "CORRAL_ATTEMPT",
                                 "CORRAL_URL", "CORRAL_TOKEN") if not env.get(name)]
    if missing:
        raise RuntimeError(f"not inside a corral task: {', '.join(missing)} not set")
    return TaskContext(int(env["CORRAL_JOB_ID"]), int(env["CORRAL_TASK_INDEX"]), int(env["CORRAL_NUM_TASKS"]),
                       int(env["CORRAL_ATTEMPT"]), env["CORRAL_URL"].rstrip("/"), env["CORRAL_TOKEN"])
