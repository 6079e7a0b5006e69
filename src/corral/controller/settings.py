"""The controller's settings, and the tokens it keeps under its data directory."""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from corral.controller.checkpoints import DEFAULT_LIMIT
from corral.core.config import CorralConfig
from corral.core.log_limits import DEFAULT_LOG_LIMIT
from corral.core.relay import CONNECT_TIMEOUT
from corral.store.database import sqlite_url


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

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def database_url(self) -> str:
        return self.db_url or sqlite_url(self.data_dir / "corral.db")


@dataclass(frozen=True)
class Tokens:
    admin: str
    join: str


def load_tokens(settings: ControllerSettings) -> Tokens:
    """Tokens from the settings, else from `tokens.json` in the data directory, else new ones stored there."""
    path = settings.data_dir / "tokens.json"
    stored = json.loads(path.read_text()) if path.exists() else {}
    tokens = Tokens(
        admin=settings.admin_token or stored.get("admin") or secrets.token_urlsafe(24),
        join=settings.join_token or stored.get("join") or secrets.token_urlsafe(24),
    )
    if stored != {"admin": tokens.admin, "join": tokens.join}:
        write_private(path, {"admin": tokens.admin, "join": tokens.join})
    return tokens


def write_cluster_file(settings: ControllerSettings, tokens: Tokens) -> None:
    """`cluster.json`: where clients of a local cluster find the controller and its tokens."""
    write_private(settings.data_dir / "cluster.json",
                  {"url": settings.url, "admin_token": tokens.admin, "join_token": tokens.join})


def private_dir(path: Path) -> None:
    """Create `path` readable by its owner only, or take group and others off an existing one: it holds secrets."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        os.chmod(path, mode & 0o700)


def write_private(path: Path, content: dict) -> None:
    """Replace `path` with `content` as JSON, readable by its owner only from the first byte on."""
    private_dir(path.parent)
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)  # O_EXCL below: never write into a file someone else prepared
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        out.write(json.dumps(content, indent=2))
    tmp.replace(path)
