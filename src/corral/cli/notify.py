"""`corral notify secret`: the key job webhooks are signed with (cluster admins)."""

from __future__ import annotations

import click

from corral.cli.common import client
from corral.client import notify as notifications


@click.group()
def notify() -> None:
    """Job notifications by webhook: the key they are signed with (cluster admins)."""


@notify.command("secret")
@click.option("--rotate", is_flag=True, help="Make a new secret, used from the next delivery on.")
def notify_secret(rotate: bool) -> None:
    """Print the cluster's webhook secret: receivers check X-Corral-Signature with it."""
    click.echo(notifications.secret(client(), rotate))
