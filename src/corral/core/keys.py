"""Keys and tokens that callers present are kept only as hashes: a leaked store leaks no key."""

from __future__ import annotations

import hashlib


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()
