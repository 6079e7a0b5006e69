"""What the proxy and the fast lane need of the app that runs a router, found at `app.state.services`.

The controller's services provide it, and so does a standalone router's `RouterServices`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from corral.serving.access import NoPeople, People
from corral.serving.router import Router


class AdminToken(Protocol):
    @property
    def admin(self) -> str: ...


class RouterHost(Protocol):
    @property
    def router(self) -> Router: ...

    @property
    def tokens(self) -> AdminToken: ...

    @property
    def people(self) -> People: ...


@dataclass(frozen=True)
class StandaloneTokens:
    admin: str


@dataclass(frozen=True)
class RouterServices:
    """A standalone router's services: its router, the admin token that reaches every deployment, and the
    controller that judges personal tokens."""

    router: Router
    tokens: StandaloneTokens
    people: People = NoPeople()


def router_host(app) -> RouterHost | None:
    """The services of `app`; None until its lifespan has set them."""
    return getattr(app.state, "services", None)
