"""The Python client of a corral controller."""

from corral.client.discovery import discover
from corral.client.errors import CorralError
from corral.client.http import Client

__all__ = ["Client", "CorralError", "discover"]
