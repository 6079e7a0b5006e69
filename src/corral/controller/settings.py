"""The controller's settings, and the cluster's tokens: kept in the store, copied to its data directory."""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from corral.controller.checkpoints import DEFAULT_LIMIT
from corral.controller.lock import holders
from corral.core.config import CorralConfig
from corral.core.estimates import MOVE_FACTOR
from corral.core.log_limits import DEFAULT_LOG_LIMIT
from corral.core.relay import CONNECT_TIMEOUT
from corral.core.webhooks import BACKOFF_BASE, Network
from corral.store.cluster_state import seed_settings
from corral.store.database import normalize_url, redacted, sqlite_url
from corral.store.store import Store

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection


WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})


@dataclass
class ControllerSettings:
    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 8265
    db_url: str | None = None
    loss_timeout: float = 30.0
    heartbeat_interval: float = 2.0
    admin_token: str | None = None
    join_token: str | None = None
    config: CorralConfig = field(default_factory=CorralConfig)  # the config file's, parsed once by the CLI
    checkpoint_limit: int = DEFAULT_LIMIT  # bytes one task's checkpoint may hold
    event_retention: float = 7 * 86400.0  # seconds events of ended jobs and of workers are kept
    lost_worker_retention: float = 86400.0  # seconds a LOST worker stays listed after its last heartbeat
    log_format: str = "text"  # or "json": one object per line (corral.log_format)
    log_limit: int = DEFAULT_LOG_LIMIT  # bytes kept per stream of each attempt
    log_retention: float | None = 30 * 86400.0  # seconds logs of ended jobs are kept (None: for ever)
    audit_retention: float | None = 365 * 86400.0  # seconds rows of the audit log are kept (None: for ever)
    metrics_token_required: bool = False  # /metrics answers only with the admin token (open by default)
    relay_connect_timeout: float = CONNECT_TIMEOUT  # seconds a client's channel waits for its worker to dial back
    notify_estimate_factor: float = MOVE_FACTOR  # an estimate that moves by more than this is a webhook call
    notify_backoff: float = BACKOFF_BASE  # seconds before a job webhook's first retry; each next wait is 3x longer
    notify_allow: tuple[Network, ...] = ()  # networks job webhooks may reach though not public
    advertise_url: str | None = None  # where workers and people reach this controller, when not its own address

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def reachable_url(self) -> str | None:
        """Where workers reach this controller: --advertise-url, else its own address unless it listens on every
        interface (then no one address names it)."""
        if self.advertise_url:
            return self.advertise_url
        return None if self.host in WILDCARD_HOSTS else self.url

    @property
    def database_url(self) -> str:
        return self.db_url or sqlite_url(self.data_dir / "corral.db")

    @property
    def shares_data_dir(self) -> bool:
        """Controllers of one PostgreSQL store may share a data directory; a SQLite store has one controller."""
        return not normalize_url(self.database_url).startswith("sqlite")


@dataclass(frozen=True)
class Tokens:
    admin: str
    join: str


class TokenMismatch(Exception):
    """The token a controller was started with is not the cluster's: the message says how to fix it, in one line."""


async def load_tokens(settings: ControllerSettings, connection: AsyncConnection) -> Tokens:
    """The cluster's tokens, kept in the store and shared by its controllers. A first start stores them: the
    settings', else those of `tokens.json` in the data directory, else new ones. `tokens.json` is then rewritten
    for local clients. A token given in the settings that is not the stored one is refused (TokenMismatch)."""
    path = settings.data_dir / "tokens.json"
    kept = json.loads(path.read_text()) if path.exists() else {}
    proposed = {"admin_token": settings.admin_token or kept.get("admin") or secrets.token_urlsafe(24),
                "join_token": settings.join_token or kept.get("join") or secrets.token_urlsafe(24)}
    stored = await seed_settings(connection, proposed)
    for name, given in (("admin_token", settings.admin_token), ("join_token", settings.join_token)):
        if given is not None and given != stored[name]:
            flag, store = f"CORRAL_{name.upper()}", redacted(settings.database_url)
            raise TokenMismatch(f"{flag} is not the {name.replace('_', ' ')} the store {store} holds, which "
                                f"every controller of the cluster shares: start without {flag} set (the stored one "
                                f"is then used), or set it to the stored one (see {path} of a controller that runs)")
    tokens = Tokens(admin=stored["admin_token"], join=stored["join_token"])
    if kept != {"admin": tokens.admin, "join": tokens.join}:
        write_private(path, {"admin": tokens.admin, "join": tokens.join})
    return tokens


async def settle_tokens(settings: ControllerSettings) -> Tokens:
    """The cluster's tokens, settled before serving, so that a TokenMismatch is one line, not a failed startup."""
    store = await Store.open(settings.database_url)
    try:
        async with store.write() as connection:
            return await load_tokens(settings, connection)
    finally:
        await store.close()


def write_cluster_file(settings: ControllerSettings, tokens: Tokens, urls: list[str]) -> None:
    """`cluster.json`: where clients of a local cluster find the controllers (`url`, the first of `urls`: every
    live one's) and the tokens."""
    write_private(settings.data_dir / "cluster.json",
                  {"url": urls[0], "urls": urls, "admin_token": tokens.admin, "join_token": tokens.join})


def other_holders(settings: ControllerSettings) -> list[str]:
    """The addresses of the other live controllers sharing the data directory."""
    return [live.url for live in holders(settings.data_dir) if live.url and live.pid != os.getpid()]


def private_dir(path: Path) -> None:
    """Create `path` readable by its owner only, or take group and others off an existing one: it holds secrets."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        os.chmod(path, mode & 0o700)


def write_private(path: Path, content: dict) -> None:
    """Replace `path` with `content` as JSON, readable by its owner only from the first byte on."""
    private_dir(path.parent)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # controllers sharing the directory write their own
    tmp.unlink(missing_ok=True)  # O_EXCL below: never write into a file someone else prepared
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        out.write(json.dumps(content, indent=2))
    tmp.replace(path)
