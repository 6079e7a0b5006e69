"""corral stats: how the cluster's own figures held up (the start estimates, so far)."""

from __future__ import annotations

import click

from corral.cli.common import client, console, json_option, print_json
from corral.cli.format import format_duration


@click.group()
def stats() -> None:
    """How the cluster's figures held up: `corral stats estimates`."""


@stats.command()
@click.option("--days", type=click.FloatRange(min=0, min_open=True, max=365), default=30.0, show_default=True,
              help="Over the jobs started in the last N days.")
@json_option
def estimates(days: float, as_json: bool) -> None:
    """How right the start estimates were: median and 90th percentile error, by how long before the start they were
    made."""
    from rich.table import Table

    found = client().estimate_stats(days)
    if as_json:
        print_json(found)
        return
    if not found.count:
        click.echo(f"no job with a start estimate started in the last {days:g} days")
        return
    table = Table(box=None, pad_edge=False)
    for column in ("MADE BEFORE THE START", "ESTIMATES", "MEDIAN ERROR", "P90 ERROR", "MEDIAN ERROR / WAIT"):
        table.add_column(column, justify="left" if column.startswith("MADE") else "right")
    for row in found.horizons:
        table.add_row(row.horizon, str(row.count), format_duration(row.median_error), format_duration(row.p90_error),
                      f"{row.median_relative:.0%}")
    console().print(table)
