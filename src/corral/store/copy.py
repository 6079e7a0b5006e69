"""Copying a whole store into an empty PostgreSQL database: how a SQLite store moves to PostgreSQL.

Both stores are migrated to head first, so they have the same tables and columns (schema.py). The rows are
copied table by table in foreign-key order, in chunks, in one transaction on the destination: a failure
leaves it as it was. PostgreSQL's sequences are then set past the highest copied id, so the next job, task
or event gets an id of its own.
"""

from __future__ import annotations

import json

from sqlalchemy import JSON, Table, Text, cast, exists, false, func, insert, null, select, text, type_coerce
from sqlalchemy.dialects.postgresql import REGCLASS
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from corral.store.database import driver_reason, explain, open_engine
from corral.store.schema import metadata

CHUNK_ROWS = 2000  # rows read and written at a time: memory stays flat however long the history is
# The tables copied: every one but the registry of live controllers, whose rows name processes of the source's.
COPIED = [table for table in metadata.sorted_tables if table.name != "controllers"]


class CopyRefused(Exception):
    """The copy cannot be made; the message says why in one line. Nothing was written."""


async def copy_store(source_url: str, destination_url: str) -> dict[str, int]:
    """Copy every row of the store at `source_url` into the empty store at `destination_url`; the rows copied per
    table, in the order they were copied."""
    source = await _open(source_url, "--from")
    try:
        destination = await _open(destination_url, "--to")
        step = "reading the destination"
        try:
            async with source.connect() as reading, destination.begin() as writing:
                await _refuse_unless_empty(writing)
                copied = {}
                for table in COPIED:
                    step = f"copying the table {table.name}"
                    copied[table.name] = await _copy_table(reading, writing, table)
                step = "setting the sequences"
                await _reset_sequences(writing)
            return copied
        except DBAPIError as error:
            raise CopyRefused(f"the copy failed {step}, nothing was written: {driver_reason(error)}") from None
        finally:
            await destination.dispose()
    finally:
        await source.dispose()


async def _open(url: str, option: str) -> AsyncEngine:
    try:
        return await open_engine(url)
    except (ArgumentError, NoSuchModuleError, ImportError, DBAPIError, OSError) as error:
        raise CopyRefused(explain(url, error, option)) from None


async def _refuse_unless_empty(writing: AsyncConnection) -> None:
    held = [table.name for table in COPIED
            if (await writing.execute(select(exists().select_from(table)))).scalar_one()]
    if held:
        raise CopyRefused(f"the destination already holds rows (in {', '.join(held)}): copy into a new, empty "
                          "database (createdb NAME)")


async def _copy_table(reading: AsyncConnection, writing: AsyncConnection, table: Table) -> int:
    """Copy one table in chunks, in primary-key order. JSON is read as its stored text, so that SQL NULL and
    JSON null stay apart."""
    json_columns = {column.name for column in table.columns if isinstance(column.type, JSON)}
    read = select(*(type_coerce(column, Text).label(column.name) if column.name in json_columns else column
                    for column in table.columns)).order_by(*table.primary_key.columns)
    copied = 0
    result = await reading.stream(read)
    async for chunk in result.partitions(CHUNK_ROWS):
        rows = [{name: _json_value(value) if name in json_columns else value
                 for name, value in row._mapping.items()} for row in chunk]
        await writing.execute(insert(table), rows)
        copied += len(rows)
    return copied


def _json_value(stored: str | None):
    """A JSON column's stored text as the value to insert: SQL NULL, JSON null or the document."""
    if stored is None:
        return null()
    document = json.loads(stored)
    return JSON.NULL if document is None else document


async def _reset_sequences(writing: AsyncConnection) -> None:
    """Set each sequence that feeds an id column past the highest id copied (nextval then gives max + 1)."""
    owned = await writing.execute(text(
        "SELECT table_name, column_name, pg_get_serial_sequence(quote_ident(table_name), column_name) "
        "FROM information_schema.columns WHERE table_schema = current_schema() "
        "AND pg_get_serial_sequence(quote_ident(table_name), column_name) IS NOT NULL"))
    for table_name, column_name, sequence in owned.all():
        if table_name not in metadata.tables:
            continue  # alembic's own bookkeeping
        column = metadata.tables[table_name].c[column_name]
        highest = select(func.coalesce(func.max(column), 0)).scalar_subquery()
        await writing.execute(select(func.setval(cast(sequence, REGCLASS), highest + 1, false())))
