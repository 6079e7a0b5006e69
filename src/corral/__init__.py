"""corral: a workload manager for ML and compute teams.

`from corral import Client` (or AsyncClient), `corral.remote`, `corral.current()`; the names
are imported on first use, so a task's process imports only what it needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corral.client.aio import AsyncClient
    from corral.client.errors import CorralError
    from corral.client.functions import RemoteError
    from corral.client.http import Client
    from corral.client.jobs import AsyncFunctionJob, FunctionJob
    from corral.client.sse import Event
    from corral.context import TaskContext, current
    from corral.core.spec import JobSpec, Resources
    from corral.core.views import AttemptView, HistoryEntry, JobView, TaskView, WorkerView
    from corral.remote_functions import RemoteFunction, remote

_EXPORTS = {
    "Client": "corral.client.http", "AsyncClient": "corral.client.aio", "CorralError": "corral.client.errors",
    "RemoteError": "corral.client.functions", "FunctionJob": "corral.client.jobs",
    "AsyncFunctionJob": "corral.client.jobs", "Event": "corral.client.sse", "current": "corral.context",
    "TaskContext": "corral.context", "remote": "corral.remote_functions", "RemoteFunction": "corral.remote_functions",
    "JobSpec": "corral.core.spec", "Resources": "corral.core.spec", "JobView": "corral.core.views",
    "TaskView": "corral.core.views", "AttemptView": "corral.core.views", "WorkerView": "corral.core.views",
    "HistoryEntry": "corral.core.views",
}
__all__ = [
    "AsyncClient", "AsyncFunctionJob", "AttemptView", "Client", "CorralError", "Event", "FunctionJob", "HistoryEntry",
    "JobSpec", "JobView", "RemoteError", "RemoteFunction", "Resources", "TaskContext", "TaskView", "WorkerView",
    "current", "remote",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'corral' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
