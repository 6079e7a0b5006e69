"""Who may call a deployment through the router: the admin token, one of its own keys, a token of its project,
a personal token of a user who may read its project, or anyone if public.

A personal token is judged against the store on every request that presents one (a standalone router asks the
controller), so a revoked or expired token, or a disabled user's, is refused at once, at every router."""

from __future__ import annotations

import hmac
import time
from typing import Protocol

from corral.core.keys import key_hash
from corral.core.roles import Action, Principal, Role, decide
from corral.core.serving import DeploymentFacts
from corral.store.store import Store
from corral.store.users import holder_of

PERSONAL_PREFIX = "cu_"  # the personal tokens' (corral.controller.users_api)


def bearer(header: str | None) -> str | None:
    scheme, _, token = (header or "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def may_call(facts: DeploymentFacts, key: str | None, admin_token: str) -> bool:
    if facts.spec.public:
        return True
    if not key:
        return False
    if hmac.compare_digest(key, admin_token):
        return True
    digest = key_hash(key)
    return any(hmac.compare_digest(digest, known) for known in (*facts.key_hashes, *facts.project_key_hashes))


def personal(key: str | None) -> bool:
    return bool(key) and key.startswith(PERSONAL_PREFIX)


class People(Protocol):
    async def may_read(self, token: str, project: str) -> bool: ...


class NoPeople:
    """A router with nobody to ask admits no personal token."""

    async def may_read(self, token: str, project: str) -> bool:
        return False


class StorePeople:
    """The controller's router: personal tokens as the store has them now."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def may_read(self, token: str, project: str) -> bool:
        async with self.store.read() as connection:
            holder = await holder_of(connection, token, time.time())
        if holder is None:
            return False
        user = holder.user
        return decide(Principal(user.name, user.cluster_admin, user.projects), Action.READ, project) is None


def reads(whoami: dict, project: str) -> bool:
    """Whether the caller GET /api/v1/whoami described may read `project`."""
    projects = {name: Role(role) for name, role in (whoami.get("projects") or {}).items()}
    caller = Principal(str(whoami.get("name")), bool(whoami.get("cluster_admin")), projects)
    return decide(caller, Action.READ, project) is None
