"""Job notifications' settings through the controller's admin API: the webhook secret, projects' default URLs."""

from __future__ import annotations

from corral.client.http import Client
from corral.client.plans import API
from corral.core.webhooks import ProjectNotify, WebhookSecret


def secret(client: Client, rotate: bool = False) -> str:
    """The cluster's webhook signing secret; with `rotate`, a new one (used from the next delivery on)."""
    return WebhookSecret.model_validate(client._json("POST" if rotate else "GET", f"{API}/admin/notify/secret")).secret


def project_defaults(client: Client) -> dict[str, str]:
    return client._json("GET", f"{API}/admin/notify/projects")


def project_default(client: Client, project: str) -> str:
    return ProjectNotify.model_validate(client._json("GET", f"{API}/admin/projects/{project}/notify")).url


def set_project_default(client: Client, project: str, url: str) -> str:
    body = ProjectNotify(url=url)
    return ProjectNotify.model_validate(client._json("PUT", f"{API}/admin/projects/{project}/notify",
                                                     json=body.model_dump())).url


def clear_project_default(client: Client, project: str) -> None:
    client.request("DELETE", f"{API}/admin/projects/{project}/notify")
