"""The audit log through the controller's API (cluster admins)."""

from __future__ import annotations

from pydantic import TypeAdapter

from corral.client.http import Client
from corral.client.plans import API
from corral.core.views import AuditEntry

_entries = TypeAdapter(list[AuditEntry])


def entries(client: Client, *, user: str | None = None, action: str | None = None, since: float | None = None,
            until: float | None = None, limit: int = 100) -> list[AuditEntry]:
    """Rows of the audit log, newest first: at most `limit`, of `user` and `action` where given, at or after
    `since` and before `until` (unix seconds)."""
    wanted = {"user": user, "action": action, "since": since, "until": until, "limit": limit}
    return _entries.validate_python(client._json("GET", f"{API}/audit",
                                                 params={k: v for k, v in wanted.items() if v is not None}))
