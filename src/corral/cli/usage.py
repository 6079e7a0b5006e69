"""`corral usage`: what each project, user or pool used over a window, and its cost, as sreport shows it."""

from __future__ import annotations

import csv
import sys

import click
from rich.table import Table
from rich.text import Text

from corral.cli.common import client, console, print_json
from corral.core.usage import GIB, HOUR, UsageBy, UsageReport, UsageTotals

CSV_FIELDS = ("attempts", "cpu_seconds", "memory_byte_seconds", "gpu_seconds", "cost")
MOMENT = "unix seconds, an ISO 8601 time, or how long ago (30d, 12h)"


@click.command()
@click.option("--since", default="30d", show_default=True, help=f"Start of the window: {MOMENT}.")
@click.option("--until", default=None, help=f"End of the window: {MOMENT}; default: now.")
@click.option("--by", type=click.Choice([b.value for b in UsageBy]), default=UsageBy.PROJECT.value,
              show_default=True, help="Group by project, user (a job's owner) or pool.")
@click.option("--json", "output", flag_value="json", help="Print the API's JSON instead of a table.")
@click.option("--csv", "output", flag_value="csv", help="Print CSV (seconds, byte-seconds), with a TOTAL row.")
def usage(since: str, until: str | None, by: str, output: str | None) -> None:
    """Usage per project, user or pool: cpu, memory and GPU hours the jobs' attempts held (a GPU share as its
    share), with a TOTAL row that is the sum of the rows, and their cost where the controller's config has prices."""
    found = client().usage(since, until, by)
    if output == "json":
        print_json(found)
    elif output == "csv":
        write_csv(found)
    else:
        console().print(usage_table(found))


def write_csv(found: UsageReport) -> None:
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow([found.by, *CSV_FIELDS])
    for key, row in [*((row.key, row) for row in found.rows), ("TOTAL", found.totals)]:
        out.writerow([key, *("" if getattr(row, f) is None else repr(getattr(row, f)) for f in CSV_FIELDS)])


def usage_table(found: UsageReport) -> Table:
    columns = [found.by.upper(), "ATTEMPTS", "CPU-HOURS", "MEM-GIB-HOURS", "GPU-HOURS"]
    if found.currency:
        columns.append(f"COST ({found.currency})")
    table = Table(box=None, pad_edge=False, show_footer=True)
    for column, footer in zip(columns, ["TOTAL", *_cells(found.totals, found.currency)], strict=True):
        table.add_column(column, footer=Text(footer, style="bold"), justify="left" if column == columns[0] else "right",
                         no_wrap=True)
    for row in found.rows:
        table.add_row(Text(row.key), *_cells(row, found.currency))
    return table


def _cells(row: UsageTotals, currency: str | None) -> list[str]:
    values = [str(row.attempts), f"{row.cpu_seconds / HOUR:.2f}", f"{row.memory_byte_seconds / GIB / HOUR:.2f}",
              f"{row.gpu_seconds / HOUR:.2f}"]
    if currency:
        values.append(f"{row.cost or 0:.2f}")
    return values
