"""Tickets: how a browser, which cannot set a WebSocket's Authorization header, opens a channel into a job.

A caller with a bearer token asks for a ticket for one job; the ticket opens one channel into that job, within
TICKET_SECONDS, and is then spent. It is kept in this controller's memory only, and carries who asked, so the
attachment it opens is recorded under that caller.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from corral.core.roles import Principal

TICKET_SECONDS = 30
MAX_TICKETS = 10_000  # unspent and unexpired at once: beyond, the oldest go first


@dataclass(frozen=True)
class Ticket:
    job_id: int
    actor: str
    expires: float
    principal: Principal  # who asked: the channel it opens is theirs, in the attachments and the audit log


class Tickets:
    def __init__(self) -> None:
        self._tickets: dict[str, Ticket] = {}

    def issue(self, job_id: int, actor: str, now: float, principal: Principal) -> str:
        self._tickets = {key: ticket for key, ticket in self._tickets.items() if ticket.expires > now}
        while len(self._tickets) >= MAX_TICKETS:
            del self._tickets[next(iter(self._tickets))]
        key = secrets.token_urlsafe(24)
        self._tickets[key] = Ticket(job_id, actor, now + TICKET_SECONDS, principal)
        return key

    def redeem(self, key: str, now: float) -> Ticket | None:
        """The ticket, spent; None when it is unknown, spent already or expired."""
        ticket = self._tickets.pop(key, None)
        return ticket if ticket is not None and ticket.expires > now else None
