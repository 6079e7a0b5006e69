"""Job notifications by webhook: which events are sent, what a delivery says, how it is signed, when it is tried again.

A job's `notify` URL (or its project's default) is POSTed a JSON body when the job starts, ends, or its estimated
start moves. The receiver checks `X-Corral-Signature` (an HMAC-SHA256 of "<timestamp>.<body>" with the cluster's
webhook secret, as Stripe signs): the timestamp inside the signature lets it refuse replays.

Whoever may submit a job chooses where the controller sends a request, from inside the cluster's network: so only
public addresses are reached, unless the cluster's admin lets networks through (`corral controller --notify-allow`).
Otherwise any member could have the controller call a cloud's metadata service, a database's HTTP port or an admin
page on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field, field_validator

from corral.core.estimates import moved_parts
from corral.core.wire import WireModel

OPT_OUT = "none"  # a job's `notify: none`: no notification, not even its project's default
MAX_URL_LENGTH = 2048
TIMEOUT = 5.0  # seconds one POST may take
MAX_TRIES = 8
BACKOFF_BASE = 10.0  # seconds before the first retry; each next wait is 3 times longer
BACKOFF_CAP = 120  # ... up to this many times the base: 10 s, 30 s, 1.5 min, 4.5 min, 13.5 min, 20 min, 20 min
JITTER = 0.2  # each wait is moved by up to this fraction, so receivers that failed together are not retried together
ESTIMATE_MOVED = "job.estimate_moved"
ENDED = {"SUCCEEDED": "job.succeeded", "FAILED": "job.failed"}  # other final states are "job.ended"
FINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "UNSCHEDULABLE", "LOST"})


def check_url(url: str) -> str:
    """`url` if a webhook may be sent to it, else ValueError saying what is wrong (or OPT_OUT, which opts out)."""
    if url == OPT_OUT:
        return url
    if len(url) > MAX_URL_LENGTH:
        raise ValueError(f"the notify URL is {len(url)} characters long; at most {MAX_URL_LENGTH}")
    if any(c.isspace() or ord(c) < 32 for c in url):
        raise ValueError("the notify URL holds a space or control character")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as error:
        raise ValueError(f"the notify URL is not a URL: {error}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"the notify URL must start with http:// or https://, not {parts.scheme or 'nothing'}:// "
                         f"(or be '{OPT_OUT}' to send nothing)")
    if not parts.hostname:
        raise ValueError("the notify URL names no host")
    if parts.username is not None or parts.password is not None:
        raise ValueError("the notify URL holds credentials (user:password@), which whoever reads the job would "
                         "see: the receiver checks X-Corral-Signature instead")
    return url


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_network(text: str) -> Network:
    """A network a cluster's admin lets webhooks reach ("10.0.0.0/8", "127.0.0.1"); ValueError saying why not."""
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        raise ValueError(f"{text!r} is not an IP network (e.g. 10.0.0.0/8, 127.0.0.1, fd00::/8)") from None


def refusal(address: str, allowed: Sequence[Network]) -> str | None:
    """Why a webhook may not connect to `address` (an IP as the resolver gave it), or None when it may: a public
    address, or one in a network the admin let through."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 zone ("fe80::1%eth0") names no other address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:10.0.0.1 reaches 10.0.0.1
    if any(ip in network for network in allowed):
        return None
    if ip.is_global and not ip.is_multicast:
        return None
    kind = ("a loopback" if ip.is_loopback else "a link-local" if ip.is_link_local else
            "a private" if ip.is_private else "a non-public")
    return f"{ip} is {kind} address (corral controller --notify-allow NETWORK lets it through)"


def chosen_url(job_url: str | None, project_url: str | None) -> str | None:
    """Where a job's notifications go: its own URL, else its project's default; none when it opted out."""
    if job_url == OPT_OUT:
        return None
    return job_url or project_url


def notification(kind: str, to_state: str | None, handler_type: str) -> str | None:
    """The notification a job's history row is, if any: `kind` its subject (job, task...), `handler_type` its
    event type."""
    if handler_type == ESTIMATE_MOVED:
        return ESTIMATE_MOVED
    if kind != "job" or to_state is None:
        return None
    if to_state == "RUNNING":
        return "job.started"
    if to_state in FINAL_STATES:
        return ENDED.get(to_state, "job.ended")
    return None


@dataclass(frozen=True)
class JobFacts:
    """What a body says of its job."""

    id: int
    name: str
    state: str
    project: str
    user: str


def content(event: str, job: JobFacts, at: float, message: str | None) -> dict[str, Any]:
    """A delivery's body, less its delivery id (known once it is stored)."""
    body: dict[str, Any] = {"event": event, "job": {"id": job.id, "name": job.name, "state": job.state,
                                                    "project": job.project, "user": job.user},
                            "at": at, "message": message}
    if event == ESTIMATE_MOVED:
        body["estimate"] = moved_parts(message)
    return body


def body_bytes(stored: Mapping[str, Any], delivery: int) -> bytes:
    return json.dumps({**stored, "delivery": delivery}, separators=(",", ":"), sort_keys=True).encode()


def signature(secret: str, timestamp: int, body: bytes) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def headers(secret: str, timestamp: int, body: bytes, event: str, delivery: int, version: str) -> dict[str, str]:
    return {"Content-Type": "application/json", "User-Agent": f"corral/{version}", "X-Corral-Event": event,
            "X-Corral-Delivery": str(delivery), "X-Corral-Timestamp": str(timestamp),
            "X-Corral-Signature": signature(secret, timestamp, body)}


def retry_delay(tries: int, base: float = BACKOFF_BASE, rng: random.Random | None = None) -> float | None:
    """Seconds to wait after the `tries`-th failed try before the next; None: give up (MAX_TRIES made)."""
    if tries >= MAX_TRIES:
        return None
    delay = base * min(3 ** (tries - 1), BACKOFF_CAP)
    return delay * (1 + JITTER * (2 * (rng or random).random() - 1))


class ProjectNotify(WireModel):
    """A project's default notify URL: where its jobs that name none send their notifications."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(..., max_length=MAX_URL_LENGTH)

    @field_validator("url")
    @classmethod
    def _checked(cls, url: str) -> str:
        if url == OPT_OUT:
            raise ValueError(f"'{OPT_OUT}' opts a job out; to drop a project's default, delete it")
        return check_url(url)


class WebhookSecret(WireModel):
    """The key receivers check `X-Corral-Signature` with."""

    secret: str
