"""`corral store`: the controller's store itself; `corral store copy` moves a SQLite store to PostgreSQL."""

from __future__ import annotations

import asyncio
import os

import click

from corral.cli.common import CliError

COPY_HOLDER = "corral store copy"


@click.group()
def store() -> None:
    """The controller's store: copy a SQLite store into PostgreSQL."""


@store.command()
@click.option("--from", "source_url", required=True, metavar="sqlite:///PATH",
              help="The SQLite store to copy (its controller stopped).")
@click.option("--to", "destination_url", required=True, metavar="postgresql://USER@HOST:PORT/DATABASE",
              help="An empty PostgreSQL database (createdb NAME).")
def copy(source_url: str, destination_url: str) -> None:
    """Copy a SQLite store into an empty PostgreSQL database, for several controllers (docs/controllers.md).

    Every table is copied in one transaction, so a failed copy writes nothing; the SQLite store is only migrated
    to the current schema, as its controller would on start.
    Stop its controller first: the copy refuses while one holds the store.
    """
    from corral.controller.sqlite_lock import SQLiteStoreInUse, hold_sqlite_store
    from corral.store.copy import CopyRefused, copy_store
    from corral.store.database import is_postgresql, redacted, sqlite_file

    database = sqlite_file(source_url)
    if database is None:
        raise CliError(f"--from {source_url!r} is not a SQLite store: write it as sqlite:///PATH")
    if not database.is_file():
        raise CliError(f"--from {source_url!r}: there is no SQLite store at {database}")
    if not os.access(database.parent, os.W_OK):
        raise CliError(f"--from {source_url!r}: corral may not write in {database.parent} (the copy locks the store "
                       "there, and migrates it)")
    if not is_postgresql(destination_url):
        raise CliError(f"--to {destination_url!r} is not a PostgreSQL database: write it as "
                       "postgresql://USER@HOST:PORT/DATABASE")

    try:
        with hold_sqlite_store(database, COPY_HOLDER):
            copied = asyncio.run(copy_store(source_url, destination_url))
    except (SQLiteStoreInUse, CopyRefused) as error:
        raise CliError(str(error)) from None
    click.echo(f"copied {database} to {redacted(destination_url)}, in one transaction:")
    for table, rows in copied.items():
        click.echo(f"  {table:<16} {rows:>9} rows")
    data_dir = database.parent if database.name == "corral.db" else "DIR (the data directory its controller used)"
    click.echo("Next: leave the SQLite store unused, and start each controller with\n"
               f"  corral controller --db {redacted(destination_url)} --data-dir {data_dir}\n"
               "(several controllers share that data directory: across machines, a shared filesystem)")
