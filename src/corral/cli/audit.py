"""`corral audit`: who did what to which object, from where, and how it ended (cluster admins)."""

from __future__ import annotations

import time

import click
from rich.table import Table

from corral.cli.common import client, console, json_option, print_json
from corral.cli.format import format_time
from corral.client import audit as audit_log
from corral.core.spec import parse_moment


def moment_option(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """Click callback of --since and --until: a malformed value is a usage error."""
    if value is None:
        return None
    try:
        return parse_moment(value, time.time())
    except ValueError as error:
        raise click.BadParameter(f"{error}; or a duration back from now, e.g. 7d, 12h", ctx=ctx, param=param) \
            from None


@click.command()
@click.option("--user", help="Only this user's calls (anonymous: those refused before saying who).")
@click.option("--action", help="Only this action, e.g. job.cancel, quota.set, token.create.")
@click.option("--since", callback=moment_option, help="From this time on: 7d (ago), 2026-01-31T08:00, unix seconds.")
@click.option("--until", callback=moment_option, help="Before this time (same forms as --since).")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True, help="At most this many rows.")
@json_option
def audit(user: str | None, action: str | None, since: float | None, until: float | None, limit: int,
          as_json: bool) -> None:
    """The audit log, newest first: every mutating API call, refused ones too (cluster admins)."""
    if since is not None and until is not None and since >= until:
        raise click.UsageError("--until must be later than --since")
    rows = audit_log.entries(client(), user=user, action=action, since=since, until=until, limit=limit)
    if as_json:
        print_json(rows)
        return
    table = Table(box=None, pad_edge=False)
    for column in ("TIME", "USER", "ROLE", "ACTION", "OBJECT", "OUTCOME", "ADDRESS"):
        table.add_column(column)
    for row in rows:
        table.add_row(format_time(row.at), row.actor, row.role or "-", row.action, row.object or "-",
                      "-" if row.outcome is None else str(row.outcome), row.address or "-")
    console().print(table)
