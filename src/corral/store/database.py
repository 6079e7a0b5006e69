"""Opening a store: the SQLite file by default, PostgreSQL by URL; both migrated to head on open."""

from __future__ import annotations

import asyncio
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

MIGRATIONS = Path(__file__).parent / "migrations"


def normalize_url(url: str) -> str:
    """Let users write plain `postgresql://` and `sqlite:///`; pick the async drivers."""
    for plain, driver in (("postgresql://", "postgresql+asyncpg://"), ("postgres://", "postgresql+asyncpg://"),
                          ("sqlite://", "sqlite+aiosqlite://")):
        if url.startswith(plain):
            return driver + url[len(plain):]
    return url


def sqlite_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


def make_engine(url: str) -> AsyncEngine:
    url = normalize_url(url)
    if url.startswith("sqlite"):
        engine = create_async_engine(url, connect_args={"timeout": 30})

        @event.listens_for(engine.sync_engine, "connect")
        def _pragmas(dbapi_connection, _record):  # WAL: readers never block the writer
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        return engine
    return create_async_engine(url, pool_size=10, max_overflow=10)


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


async def migrate(engine: AsyncEngine) -> None:
    """Bring the schema to the newest migration (idempotent)."""

    def upgrade(sync_connection) -> None:
        config = _alembic_config()
        config.attributes["connection"] = sync_connection
        command.upgrade(config, "head")

    async with engine.begin() as connection:
        await connection.run_sync(upgrade)


async def open_engine(url: str) -> AsyncEngine:
    engine = make_engine(url)
    await migrate(engine)
    return engine


def run_migrations_sync(url: str) -> None:
    async def main() -> None:
        engine = await open_engine(url)
        await engine.dispose()

    asyncio.run(main())
