"""Opening a store: the SQLite file by default, PostgreSQL by URL; both migrated to head on open."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from asyncpg.exceptions import InvalidAuthorizationSpecificationError, InvalidCatalogNameError, InvalidPasswordError
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, NoSuchModuleError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from corral.store.handler_locks import hold_migration_lock, release_migration_lock
from corral.store.sqlite_trips import BUSY_TIMEOUT, OneTripDBAPI, WalSize

MIGRATIONS = Path(__file__).parent / "migrations"
CONNECT_TIMEOUT = 10.0  # seconds to reach PostgreSQL: an unreachable host is reported, not waited on for a minute
log = logging.getLogger("corral.store")

URL_FORMS = "postgresql://USER@HOST:PORT/DATABASE or sqlite:///PATH"


class StoreUnavailable(Exception):
    """The store cannot be opened; the message says what is wrong and how to fix it, in one line."""


# A write that breaks a uniqueness rule (an idempotency key or a token used twice): the driver's own error,
# named here so that the layers above the store catch it without importing sqlalchemy.
Conflict = IntegrityError


def normalize_url(url: str) -> str:
    """Let users write plain `postgresql://` and `sqlite:///`; pick the async drivers."""
    for plain, driver in (("postgresql://", "postgresql+asyncpg://"), ("postgres://", "postgresql+asyncpg://"),
                          ("sqlite://", "sqlite+aiosqlite://")):
        if url.startswith(plain):
            return driver + url[len(plain):]
    return url


def redacted(url: str) -> str:
    """The store's URL as it may be shown: without its password."""
    return make_url(normalize_url(url)).render_as_string(hide_password=True)


def sqlite_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


def sqlite_file(url: str) -> Path | None:
    """The database file of a `sqlite:///PATH` URL; None for any other URL, a malformed one or an in-memory one."""
    try:
        parsed = make_url(normalize_url(url))
    except ArgumentError:
        return None
    if not parsed.drivername.startswith("sqlite") or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def is_postgresql(url: str) -> bool:
    try:
        return make_url(normalize_url(url)).drivername.startswith("postgresql")
    except ArgumentError:
        return False


POOL = {"pool_size": 10, "max_overflow": 10}  # PostgreSQL's readers; SQLite's are SQLAlchemy's default
ONE_CONNECTION = {"pool_size": 1, "max_overflow": 0}  # the writer's: one transaction at a time (Store.write)


def make_engine(url: str, pool: dict[str, int] | None = None, *, on_loop: bool = False) -> AsyncEngine:
    """An engine of `pool` connections (by default, POOL on PostgreSQL and SQLAlchemy's default on SQLite). With
    `on_loop`, a SQLite engine's statements run on the event loop (sqlite_trips.py: the single writer's)."""
    url = normalize_url(url)
    if url.startswith("sqlite"):
        database = make_url(url).database
        engine = create_async_engine(url, module=OneTripDBAPI(on_loop=on_loop), connect_args={"timeout": BUSY_TIMEOUT},
                                     **(pool or {}))

        @event.listens_for(engine.sync_engine, "connect")
        def _pragmas(dbapi_connection, _record):  # WAL: readers never block the writer
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            wal = cursor.fetchone()[0] == "wal"  # not for a database in memory
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            if on_loop:  # waits for another connection's lock in the connection's thread, never on the loop
                cursor.execute("PRAGMA busy_timeout=0")
                if wal and database:  # its commits on the loop, its checkpoints in its thread (sqlite_trips.py)
                    cursor.execute("PRAGMA wal_autocheckpoint=0")
                    dbapi_connection.wal = WalSize(Path(database).absolute())
            cursor.close()

        return engine
    return create_async_engine(url, **(pool or POOL), connect_args={"timeout": CONNECT_TIMEOUT})


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


async def migrate(engine: AsyncEngine) -> None:
    """Bring the schema to the newest migration (idempotent). On PostgreSQL several controllers may start at once:
    a session advisory lock makes the others wait while one migrates, and they then find the schema at head."""
    before, after = await _run_migrations(engine, lambda config: command.upgrade(config, "head"))
    if before != after:
        log.info("migrated the store from revision %s to %s", before or "(empty)", after)


async def downgrade(engine: AsyncEngine, revision: str) -> None:
    """Take the schema back to `revision` ("base": no tables), keeping the rows the older schema can hold."""
    await _run_migrations(engine, lambda config: command.downgrade(config, revision))


async def _run_migrations(engine: AsyncEngine, step) -> tuple[str | None, str | None]:
    """Run `step(config)` (alembic's upgrade or downgrade) in one transaction; the revisions before and after.

    On SQLite a migration that changes a table's columns copies it into a new table and drops the old one, and
    dropping a table that other rows point at breaks their foreign keys while foreign keys are enforced. So, as
    SQLite's documentation prescribes for such changes, they are not enforced during the transaction, every row is
    checked against them before it commits (PRAGMA foreign_key_check), and they are enforced again afterwards.
    The pragma is a no-op inside a transaction, hence set on the connection before it begins."""

    def run(sync_connection) -> tuple[str | None, str | None]:
        config = _alembic_config()
        config.attributes["connection"] = sync_connection
        before = MigrationContext.configure(sync_connection).get_current_revision()
        step(config)
        if sqlite:
            _check_foreign_keys(sync_connection)
        return before, MigrationContext.configure(sync_connection).get_current_revision()

    locked = engine.dialect.name == "postgresql"
    sqlite = engine.dialect.name == "sqlite"
    async with engine.connect() as connection:
        if locked:
            await hold_migration_lock(connection)
            await connection.commit()  # the lock is the session's: it outlives this transaction
        if sqlite:
            await connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
            await connection.commit()
        try:
            async with connection.begin():
                return await connection.run_sync(run)
        finally:
            if locked:
                await release_migration_lock(connection)
                await connection.commit()
            if sqlite:
                await connection.exec_driver_sql("PRAGMA foreign_keys=ON")  # as every connection has it (make_engine)
                await connection.commit()


def _check_foreign_keys(sync_connection) -> None:
    broken = sync_connection.exec_driver_sql("PRAGMA foreign_key_check").all()
    if broken:
        tables = sorted({f"{row[0]} -> {row[2]}" for row in broken})
        raise RuntimeError(f"the migration left {len(broken)} rows pointing at no row: {', '.join(tables)}")


async def open_engine(url: str) -> AsyncEngine:
    engine = make_engine(url)
    await migrate(engine)
    return engine


def check_store(url: str) -> None:
    """Open the store, migrate it and close it, or raise StoreUnavailable: run before serving, so a wrong
    `--db` is one line, not a traceback from inside the server's startup."""
    async def open_and_close() -> None:
        await (await open_engine(url)).dispose()

    try:
        asyncio.run(open_and_close())
    except (ArgumentError, NoSuchModuleError, ImportError, DBAPIError, OSError) as error:
        raise StoreUnavailable(explain(url, error)) from None


def explain(url: str, error: Exception, option: str = "--db") -> str:
    """What went wrong opening the store at `url` (given as `option`), and what to change."""
    if isinstance(error, ArgumentError):
        return f"{option} {url!r} is not a database URL: write it as {URL_FORMS}"
    shown = redacted(url)
    if isinstance(error, NoSuchModuleError | ImportError):
        return f"{option} {shown}: corral has no driver for it here ({error}); write it as {URL_FORMS}"
    cause = _innermost(error)
    reason = driver_reason(error)
    if isinstance(cause, InvalidCatalogNameError):
        hint = f"create it (createdb {make_url(shown).database}) or fix the database name in {option}"
    elif isinstance(cause, InvalidAuthorizationSpecificationError | InvalidPasswordError):
        hint = f"fix the user or password in {option}, or let the server accept it"
    elif isinstance(cause, OSError):
        hint = f"is the database server running, and are the host and port in {option} right?"
    elif shown.startswith("sqlite"):
        hint = "does the file's directory exist, and may corral write there?"
    else:
        hint = f"check the {option} URL and the database server"
    return f"cannot open the store at {shown}: {reason}; {hint}"


def driver_reason(error: Exception) -> str:
    """The first line of the driver's own error beneath `error`."""
    cause = _innermost(error)
    return str(cause).splitlines()[0] if str(cause) else type(cause).__name__


def _innermost(error: BaseException) -> BaseException:
    """The driver's own error beneath SQLAlchemy's wrappers (their text adds a link, not a reason)."""
    while (inner := error.__cause__ or getattr(error, "orig", None)) is not None and inner is not error:
        error = inner
    return error
