"""What the controllers of one store share: settings (the admin and join tokens, the webhook secret), and the
registry of controllers."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cache

from sqlalchemy import Insert, bindparam, delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.store.schema import cluster_settings, controllers


def dialect_insert(connection: AsyncConnection, table):
    """An INSERT that can give way on a conflict, in the connection's dialect."""
    return (sqlite.insert if connection.dialect.name == "sqlite" else postgresql.insert)(table)


async def seed_settings(connection: AsyncConnection, proposed: dict[str, str]) -> dict[str, str]:
    """The stored value of each setting named in `proposed`, storing the proposed one where none is yet. Two
    controllers starting at once both propose: one insert wins, the other does nothing and reads the winner's."""
    for name, value in proposed.items():
        await connection.execute(dialect_insert(connection, cluster_settings).values(name=name, value=value)
                                 .on_conflict_do_nothing(index_elements=["name"]))
    rows = await connection.execute(select(cluster_settings.c.name, cluster_settings.c.value)
                                    .where(cluster_settings.c.name.in_(list(proposed))))
    return {row.name: row.value for row in rows}


async def put_setting(connection: AsyncConnection, name: str, value: str) -> None:
    """Store `value` as setting `name`, replacing what was there."""
    await connection.execute(dialect_insert(connection, cluster_settings).values(name=name, value=value)
                             .on_conflict_do_update(index_elements=["name"], set_={"value": value}))


@dataclass(frozen=True)
class ControllerRow:
    id: str
    url: str
    pid: int
    host: str
    version: str
    started_at: float
    seen_at: float
    handlers: dict[str, float]
    last_pass_at: float | None


async def register_controller(connection: AsyncConnection, row: ControllerRow) -> None:
    """Insert this controller's row, or refresh it (url, seen_at, handlers, last pass)."""
    await connection.execute(_registration(connection.dialect.name), asdict(row))


# Every controller registers, prunes and lists the registry once a second: its statements are made once (a statement
# made afresh cost more to build and to walk for SQLAlchemy's cache key than to run).
@cache
def _registration(dialect: str) -> Insert:
    """The upsert of a controller's row in the dialect: a row already there takes the refreshed columns given."""
    insert = (sqlite.insert if dialect == "sqlite" else postgresql.insert)(controllers)
    return insert.on_conflict_do_update(
        index_elements=["id"], set_={name: insert.excluded[name] for name in ("url", "seen_at", "handlers",
                                                                              "last_pass_at")})


_PRUNE = delete(controllers).where(controllers.c.seen_at < bindparam("silent_since"))
_REGISTRY = select(controllers).order_by(controllers.c.started_at, controllers.c.id)


async def unregister_controller(connection: AsyncConnection, controller_id: str) -> None:
    await connection.execute(delete(controllers).where(controllers.c.id == controller_id))


async def prune_controllers(connection: AsyncConnection, silent_since: float) -> int:
    """Forget controllers not seen since `silent_since`."""
    return (await connection.execute(_PRUNE, {"silent_since": silent_since})).rowcount


async def list_controllers(connection: AsyncConnection) -> list[ControllerRow]:
    rows = await connection.execute(_REGISTRY)
    return [ControllerRow(row.id, row.url, row.pid, row.host, row.version, row.started_at, row.seen_at,
                          dict(row.handlers or {}), row.last_pass_at) for row in rows]
