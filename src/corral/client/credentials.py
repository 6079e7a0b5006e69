"""The token `corral login` stores: {url, token} in the user's config directory, readable by the user alone.

$XDG_CONFIG_HOME/corral/credentials.json, else ~/.config/corral/credentials.json; the file is mode 0600 and its
directory 0700, as ssh keeps its keys, so another account on a shared machine cannot read the token.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from corral.client.errors import CorralError


@dataclass(frozen=True)
class Login:
    url: str
    token: str


def credentials_file(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    config = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
    return config / "corral" / "credentials.json"


def store(login: Login, env: Mapping[str, str] | None = None) -> Path:
    """Writes the login whole or not at all (a temporary file renamed over the old one), created 0600."""
    path = credentials_file(env)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.parent.chmod(0o700)  # also when it existed: it holds a secret
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".credentials-")  # mkstemp creates it 0600
    try:
        with os.fdopen(descriptor, "w") as file:
            json.dump({"url": login.url, "token": login.token}, file)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def load(env: Mapping[str, str] | None = None) -> Login | None:
    """The stored login, None when there is none; a file that cannot be read is an error naming it."""
    path = credentials_file(env)
    if not path.is_file():
        return None
    try:
        stored = json.loads(path.read_text())
        return Login(str(stored["url"]).rstrip("/"), str(stored["token"]))
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CorralError(None, f"cannot read {path}: {error!r}; run `corral login URL` again, "
                                "or `corral logout` to remove it") from None


def forget(env: Mapping[str, str] | None = None) -> Path | None:
    """Removes the stored login; returns where it was, None when there was none."""
    path = credentials_file(env)
    if not path.exists():
        return None
    path.unlink()
    return path
