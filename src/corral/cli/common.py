"""What every command shares: the client, the error convention, key=value options, tables and JSON output.

Every command imports this module, its help too: the client, the models and rich are imported by the
functions that use them, not here (see main.py).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import click

from corral.core.spec_text import MAX_CUSTOM_AMOUNT, parse_gpus

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from corral.client.http import Client


class CliError(click.ClickException):
    """Printed as `error: ...` on stderr, exit code 1."""

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


def client(ctx: click.Context | None = None) -> Client:
    """The client in the context object (tests inject a fake one there), else one found by discovery."""
    ctx = ctx or click.get_current_context()
    obj = ctx.find_root().ensure_object(dict)
    if obj.get("client") is None:
        from corral.client.http import Client

        obj["client"] = Client()
        ctx.find_root().call_on_close(obj["client"].close)
    return obj["client"]


def parse_pairs(ctx: click.Context | None, param: click.Parameter | None, values: Iterable[str]) -> dict[str, str]:
    """Click callback for repeatable K=V options; a malformed one is a usage error (exit 2)."""
    pairs: dict[str, str] = {}
    for value in values or ():
        key, sep, val = value.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{value!r} is not KEY=VALUE", ctx=ctx, param=param)
        pairs[key.strip()] = val
    return pairs


def parse_amounts(ctx: click.Context | None, param: click.Parameter | None, values: Iterable[str]) -> dict[str, float]:
    """Click callback for repeatable NAME=N options (custom resources): N a non-negative number."""
    amounts: dict[str, float] = {}
    for name, value in parse_pairs(ctx, param, values).items():
        try:
            amounts[name] = float(value)
        except ValueError:
            raise click.BadParameter(f"{name}={value}: {value!r} is not a number", ctx=ctx, param=param) from None
        if not 0 <= amounts[name] <= MAX_CUSTOM_AMOUNT:  # NaN is refused too
            raise click.BadParameter(f"{name}={value}: must be a number from 0 to {MAX_CUSTOM_AMOUNT:g}",
                                     ctx=ctx, param=param)
    return amounts


class GpuAmount(click.ParamType):
    """--gpus: whole GPUs, or a share of one (0.01-0.99), by the spec's own rule (which refuses negatives too)."""

    name = "N"
    HELP = "whole GPUs, or a share of one (0.01-0.99)"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return parse_gpus(value)
        except ValueError as error:
            self.fail(str(error), param, ctx)


def to_jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):  # a pydantic model, recognised without importing pydantic for a dict
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    return value


def print_json(value: Any) -> None:
    click.echo(json.dumps(to_jsonable(value), indent=2))


# A table cell: a string (rich reads its markup), or (text, style) pieces, at least one ("\n" in a text starts a
# line); the first piece's style is the whole cell's, under the others' (a pending job's reason is dim magenta).
Cell = str | Sequence[tuple[str, str]]
PIPED_WIDTH = 1000  # the console's width when stdout is not a terminal


def console() -> Console:
    """A console on the current stdout, so CliRunner captures tables too."""
    # Piped output keeps whole values (for grep and awk) instead of cutting them to 80 columns.
    from rich.console import Console

    width = None if sys.stdout.isatty() else PIPED_WIDTH
    return Console(file=sys.stdout, highlight=False, soft_wrap=False, width=width)


def print_table(columns: Sequence[str], rows: Iterable[Sequence[Cell]], wrapping: Collection[str] = ()) -> None:
    """A table with a header and no borders, as rich draws it (`wrapping`: the columns it may wrap). Where the
    text would come out the same, it is laid out here without importing rich (a tenth of `corral jobs`)."""
    rows = list(rows)
    text = plain_table(columns, rows) if plain_stdout() else None
    if text is not None:
        click.echo(text)
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for column in columns:
        table.add_column(column, no_wrap=column not in wrapping)
    for row in rows:
        table.add_row(*(cell if isinstance(cell, str) else styled(cell) for cell in row))
    console().print(table)


def styled(pieces: Sequence[tuple[str, str]]) -> Text:
    """A cell's pieces as rich text; the first piece's style is the whole cell's, padding too, as rich gives
    `Text(text, style)`."""
    from rich.text import Text

    (text, style), *more = pieces
    cell = Text(text, style=style)
    for text, style in more:
        cell.append(text, style=style)
    return cell


def plain_stdout() -> bool:
    """Whether rich would write stdout without escape codes, at PIPED_WIDTH: not a terminal, and neither
    TTY_COMPATIBLE=1 nor FORCE_COLOR says to style it anyway (rich's own test)."""
    if sys.stdout.isatty():
        return False
    compatible = os.environ.get("TTY_COMPATIBLE", "")
    return compatible == "0" or (compatible != "1" and not os.environ.get("FORCE_COLOR"))


def plain_table(columns: Sequence[str], rows: list[Sequence[Cell]]) -> str | None:
    """The table as rich lays it out unstyled: each column as wide as its widest line, two spaces between columns,
    each line of a row padded to the table's width. None where rich's layout could differ: a character that is not
    printable ASCII (rich measures wide ones, expands tabs), a string cell that could hold markup, or a table wider
    than PIPED_WIDTH (rich would wrap or cut it)."""
    cells = [[cell if isinstance(cell, str) else "".join(text for text, _ in cell) for cell in row] for row in rows]
    for row, texts in zip(rows, cells, strict=True):
        for cell, text in zip(row, texts, strict=True):
            if not (text.replace("\n", "").isprintable() and text.isascii()) or \
                    (isinstance(cell, str) and ("[" in text or ":" in text)):
                return None
    lines = [[text.split("\n") for text in texts] for texts in cells]
    widths = [max([len(column), *(len(line) for row in lines for line in row[i])]) for i, column in enumerate(columns)]
    if sum(widths) + 2 * (len(widths) - 1) > PIPED_WIDTH:
        return None
    out = ["  ".join(column.ljust(width) for column, width in zip(columns, widths, strict=True))]
    for row in lines:
        for n in range(max(len(cell) for cell in row)):
            out.append("  ".join((cell[n] if n < len(cell) else "").ljust(width)
                                 for cell, width in zip(row, widths, strict=True)))
    return "\n".join(out)


json_option = click.option("--json", "as_json", is_flag=True, help="Print the API's JSON instead of a table.")
