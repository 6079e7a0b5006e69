"""The Python client of a corral controller, sync and async.

The names are imported on first use, so importing one module of the package (the errors, say) does not
load the clients, httpx and the models.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corral.client.aio import AsyncClient
    from corral.client.discovery import discover
    from corral.client.errors import CorralError
    from corral.client.functions import RemoteError
    from corral.client.http import Client
    from corral.client.jobs import AsyncFunctionJob, FunctionJob

_EXPORTS = {
    "AsyncClient": "corral.client.aio", "AsyncFunctionJob": "corral.client.jobs", "Client": "corral.client.http",
    "CorralError": "corral.client.errors", "FunctionJob": "corral.client.jobs",
    "RemoteError": "corral.client.functions", "discover": "corral.client.discovery",
}
__all__ = ["AsyncClient", "AsyncFunctionJob", "Client", "CorralError", "FunctionJob", "RemoteError", "discover"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'corral.client' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
