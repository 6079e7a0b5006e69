"""Where the controller is: CORRAL_URL/CORRAL_TOKEN, else `corral login`'s stored token, else the cluster.json of a
local `corral up`."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from corral.client.credentials import credentials_file, load
from corral.client.errors import CorralError

DEFAULT_DATA_DIR = ".corral"


@dataclass(frozen=True)
class Endpoint:
    url: str  # one controller's URL, or several controllers' of one database, comma-separated
    token: str
    source: str  # where it was found, for error messages


def data_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("CORRAL_DATA_DIR") or DEFAULT_DATA_DIR)


def discover(env: Mapping[str, str] | None = None) -> Endpoint:
    """The environment wins, then the login `corral login` stored, then the data directory of a local `corral up`:
    what a person set for this shell beats what they set for their account, which beats the machine's default.

    CORRAL_TOKEN wins over the login's token and the data directory's admin token too, also without CORRAL_URL.
    """
    env = os.environ if env is None else env
    cluster_file = data_dir(env) / "cluster.json"
    url = env.get("CORRAL_URL")
    if url:
        token = env.get("CORRAL_TOKEN")
        if not token:
            raise CorralError(None, "CORRAL_URL is set but CORRAL_TOKEN is not: set it to your token "
                                    "(`corral token create`) or the cluster's admin token")
        return Endpoint(url.rstrip("/"), token, "CORRAL_URL")
    login = load(env)
    if login is not None:
        return Endpoint(login.url, env.get("CORRAL_TOKEN") or login.token, str(credentials_file(env)))
    if not cluster_file.is_file():
        raise CorralError(None, f"no corral cluster found: CORRAL_URL is not set, no `corral login` is stored and "
                                f"{cluster_file.resolve()} does not exist; run `corral login URL` or `corral up` "
                                "(or set CORRAL_DATA_DIR to its data directory), or set CORRAL_URL and CORRAL_TOKEN")
    try:
        cluster = json.loads(cluster_file.read_text())
        # A token the user gives is the one they mean: it is used, and fails if wrong, rather than the file's admin one.
        token = env.get("CORRAL_TOKEN") or str(cluster["admin_token"])
        return Endpoint(str(cluster["url"]).rstrip("/"), token, str(cluster_file.resolve()))
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CorralError(None, f"cannot read {cluster_file.resolve()}: {error!r}; "
                                "restart `corral up` or set CORRAL_URL and CORRAL_TOKEN") from None
