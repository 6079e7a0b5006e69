"""One controller at a time per handler: a transaction-scoped PostgreSQL advisory lock, keyed by the handler's name.

Several controllers may serve one PostgreSQL database; each runs every handler's loop, but a handler's run takes
`pg_try_advisory_xact_lock` as the first statement of its transaction, so only one controller runs it at a time and
the lock goes with the transaction's end (commit, rollback, or a dead connection). A controller that does not get
it skips that run and looks again soon. On SQLite one controller owns the store, so the lock is always got.
"""

from __future__ import annotations

import zlib

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

NAMESPACE = 0x636F7272  # "corr": the first key of every corral handler lock, apart from other users' advisory locks
MIGRATION = "corral-migrate"  # the session lock `migrate` holds around alembic's upgrade


class HandlerBusy(Exception):
    """Another controller runs this handler now: this run committed nothing and is made again soon."""


def handler_key(name: str) -> int:
    """A stable signed 32-bit key for `name` (crc32: the same in every process, unlike hash())."""
    key = zlib.crc32(name.encode())
    return key - (1 << 32) if key >= 1 << 31 else key


async def take_handler_lock(connection: AsyncConnection, name: str) -> bool:
    """Take `name`'s lock for the rest of this transaction; False when another transaction holds it."""
    if connection.dialect.name == "sqlite":
        return True
    return bool((await connection.execute(text("SELECT pg_try_advisory_xact_lock(:namespace, :key)"),
                                          {"namespace": NAMESPACE, "key": handler_key(name)})).scalar())


async def hold_migration_lock(connection: AsyncConnection) -> None:
    """Wait for, then hold for this session, the lock that lets one controller migrate at a time."""
    await connection.execute(text("SELECT pg_advisory_lock(:namespace, :key)"),
                             {"namespace": NAMESPACE, "key": handler_key(MIGRATION)})


async def release_migration_lock(connection: AsyncConnection) -> None:
    await connection.execute(text("SELECT pg_advisory_unlock(:namespace, :key)"),
                             {"namespace": NAMESPACE, "key": handler_key(MIGRATION)})
