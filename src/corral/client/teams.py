"""Users, project members and personal tokens through the controller's API, as plans (see `plans`).

Their answers are returned as the API's JSON (dicts): the views are the controller's to shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from corral.client.plans import API, Call, Plan


def whoami() -> Plan[dict[str, Any]]:
    """Who the token acts as: {name, role, cluster_admin, projects, token: {kind, id?, expires_at?}}."""
    response = yield Call("GET", f"{API}/whoami")
    return response.json()


def create_user(name: str, cluster_admin: bool = False, unix_user: str | None = None,
                projects: Mapping[str, str] | None = None) -> Plan[dict[str, Any]]:
    response = yield Call("POST", f"{API}/users", json={"name": name, "cluster_admin": cluster_admin,
                                                         "unix_user": unix_user, "projects": dict(projects or {})})
    return response.json()


def users() -> Plan[list[dict[str, Any]]]:
    response = yield Call("GET", f"{API}/users")
    return list(response.json())


def user(name: str) -> Plan[dict[str, Any]]:
    response = yield Call("GET", f"{API}/users/{quote(name, safe='')}")
    return response.json()


def update_user(name: str, changes: Mapping[str, Any]) -> Plan[dict[str, Any]]:
    """Only the fields in `changes` change (unix_user None clears the mapping)."""
    response = yield Call("PATCH", f"{API}/users/{quote(name, safe='')}", json=dict(changes))
    return response.json()


def member_path(project: str, name: str) -> str:
    return f"{API}/projects/{quote(project, safe='')}/members/{quote(name, safe='')}"


def set_member(project: str, name: str, role: str) -> Plan[dict[str, Any]]:
    response = yield Call("PUT", member_path(project, name), json={"role": role})
    return response.json()


def remove_member(project: str, name: str) -> Plan[None]:
    yield Call("DELETE", member_path(project, name))


def members(project: str) -> Plan[list[dict[str, Any]]]:
    response = yield Call("GET", f"{API}/projects/{quote(project, safe='')}/members")
    return list(response.json())


def create_token(name: str | None, expires_in: int | None, user: str | None) -> Plan[dict[str, Any]]:
    """A personal token: the answer holds the token itself, which the controller never shows again."""
    response = yield Call("POST", f"{API}/tokens", json={"name": name, "expires_in": expires_in, "user": user})
    return response.json()


def tokens(user: str | None = None) -> Plan[list[dict[str, Any]]]:
    """The tokens of the caller (or of `user`, for a cluster admin): ids, names and prefixes, never secrets."""
    response = yield Call("GET", f"{API}/tokens", params={"user": user} if user else {})
    return list(response.json())


def revoke_token(token_id: int) -> Plan[None]:
    yield Call("DELETE", f"{API}/tokens/{token_id}")
