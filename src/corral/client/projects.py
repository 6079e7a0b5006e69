"""Project tokens through the controller's admin API: issue (shown once), list, revoke."""

from __future__ import annotations

from pydantic import TypeAdapter

from corral.client.http import Client
from corral.client.plans import API
from corral.core.views import IssuedToken, ProjectToken

_tokens = TypeAdapter(list[ProjectToken])


def issue_token(client: Client, project: str, token: str | None = None) -> IssuedToken:
    """A token that calls `project`'s deployments through the router: `token` if given, else a random one."""
    return IssuedToken.model_validate(client._json("POST", f"{API}/admin/projects/{project}/tokens",
                                                   json={"token": token}))


def tokens(client: Client, project: str) -> list[ProjectToken]:
    return _tokens.validate_python(client._json("GET", f"{API}/admin/projects/{project}/tokens"))


def revoke_token(client: Client, project: str, token_id: int) -> None:
    client.request("DELETE", f"{API}/admin/projects/{project}/tokens/{token_id}")
