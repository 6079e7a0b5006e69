"""Who may call a deployment through the router: the admin token, one of its own keys, a token of its project,
or anyone if public."""

from __future__ import annotations

import hmac

from corral.core.keys import key_hash
from corral.core.serving import DeploymentFacts


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
