"""`corral project token|tokens|revoke`: the keys that call a project's deployments through the router; `corral
project notify`: where its jobs' notifications go by default."""

from __future__ import annotations

import time

import click
from rich.table import Table

from corral.cli.common import client, console, json_option, print_json
from corral.cli.format import format_age
from corral.client import notify, projects


@click.group()
def project() -> None:
    """Issue, list and revoke a project's tokens, and set its default notify URL (admin)."""


@project.command("token")
@click.argument("name")
@click.option("--token", "given", help="Accept this token instead of a random one (16 printable characters or more).")
def project_token(name: str, given: str | None) -> None:
    """Issue a token that calls NAME's deployments through the router; prints it once."""
    click.echo(projects.issue_token(client(), name, given).token)


@project.command("tokens")
@click.argument("name")
@json_option
def project_tokens(name: str, as_json: bool) -> None:
    """The tokens NAME has (ids and ages, never the tokens)."""
    found = projects.tokens(client(), name)
    if as_json:
        print_json(found)
        return
    table = Table(box=None, pad_edge=False)
    for column in ("ID", "PROJECT", "AGE"):
        table.add_column(column)
    now = time.time()
    for token in found:
        table.add_row(str(token.id), token.project, format_age(now - token.created_at))
    console().print(table)


@project.command("revoke")
@click.argument("name")
@click.argument("token_id", type=click.IntRange(min=1))
def project_revoke(name: str, token_id: int) -> None:
    """Revoke NAME's token TOKEN_ID: the router refuses it from the next request on."""
    projects.revoke_token(client(), name, token_id)
    click.echo(f"{name}: token {token_id} revoked")


@project.command("notify")
@click.argument("name", required=False)
@click.argument("url", required=False)
@click.option("--clear", is_flag=True, help="Drop NAME's default: its jobs notify only where they say.")
@json_option
def project_notify(name: str | None, url: str | None, clear: bool, as_json: bool) -> None:
    """Where NAME's jobs send notifications when they name no --notify URL: set it (URL), show it, or --clear it.
    Without NAME: every project's default (cluster admins)."""
    if name is None:
        found = notify.project_defaults(client())
    elif clear:
        if url is not None:
            raise click.UsageError("give a URL or --clear, not both")
        notify.clear_project_default(client(), name)
        click.echo(f"{name}: no default notify URL")
        return
    else:
        found = {name: notify.set_project_default(client(), name, url) if url is not None
                 else notify.project_default(client(), name)}
    if as_json:
        print_json(found)
        return
    table = Table(box=None, pad_edge=False)
    for column in ("PROJECT", "NOTIFY"):
        table.add_column(column)
    for project_name, project_url in found.items():
        table.add_row(project_name, project_url)
    console().print(table)
