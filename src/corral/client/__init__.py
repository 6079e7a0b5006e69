"""The Python client of a corral controller, sync and async."""

from corral.client.aio import AsyncClient
from corral.client.discovery import discover
from corral.client.errors import CorralError
from corral.client.functions import RemoteError
from corral.client.http import Client
from corral.client.jobs import AsyncFunctionJob, FunctionJob

__all__ = ["AsyncClient", "AsyncFunctionJob", "Client", "CorralError", "FunctionJob", "RemoteError", "discover"]
