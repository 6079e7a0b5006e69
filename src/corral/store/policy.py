"""Pool policies and project quotas in the store: read into a `Policy` per pass, written by config and API."""

from __future__ import annotations

from sqlalchemy import Integer, delete, insert, literal_column, select, union_all, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.config import CorralConfig, PoolPolicy, ProjectQuota
from corral.scheduling.policy import Policy
from corral.store.schema import pools, quotas

# Read by every placing run, in one statement (its pools' rows, then its quotas'): made once (a statement made
# afresh cost more to build and key than to run).
_POLICY_ROWS = union_all(select(literal_column("0", Integer), pools.c.name, pools.c.policy),
                         select(literal_column("1", Integer), quotas.c.project, quotas.c.limits))


async def read_policy(connection: AsyncConnection) -> Policy:
    pool_rows, quota_rows = {}, {}
    for quota, name, value in (await connection.execute(_POLICY_ROWS)).all():
        (quota_rows if quota else pool_rows)[name] = value
    return Policy(pools={name: PoolPolicy.model_validate(policy) for name, policy in pool_rows.items()},
                  quotas={project: dict(limits) for project, limits in quota_rows.items()})


async def read_pool_policy(connection: AsyncConnection, name: str) -> PoolPolicy:
    """One pool's policy (the defaults where none is set), in one row's read: what a submission is checked
    against."""
    stored = (await connection.execute(select(pools.c.policy).where(pools.c.name == name))).scalar()
    return Policy(pools={} if stored is None else {name: PoolPolicy.model_validate(stored)}).pool(name)


async def put_pool(connection: AsyncConnection, name: str, policy: PoolPolicy, now: float) -> None:
    await _upsert(connection, pools, pools.c.name, name,
                  {"policy": policy.model_dump(mode="json", exclude_defaults=True), "updated_at": now})


async def put_quota(connection: AsyncConnection, project: str, quota: ProjectQuota, now: float) -> None:
    await _upsert(connection, quotas, quotas.c.project, project, {"limits": quota.limits, "updated_at": now})


async def delete_quota(connection: AsyncConnection, project: str) -> bool:
    return (await connection.execute(delete(quotas).where(quotas.c.project == project))).rowcount > 0


async def delete_pool(connection: AsyncConnection, name: str) -> bool:
    return (await connection.execute(delete(pools).where(pools.c.name == name))).rowcount > 0


async def apply_policy_file(connection: AsyncConnection, config: CorralConfig, now: float) -> None:
    """The config file wins over the stored value for every pool and project it names; others are kept."""
    for name, policy in config.pools.items():
        await put_pool(connection, name, policy, now)
    for project, quota in config.quotas.items():
        await put_quota(connection, project, quota, now)


async def _upsert(connection: AsyncConnection, table, key_column, key: str, values: dict) -> None:
    done = await connection.execute(update(table).where(key_column == key).values(**values))
    if done.rowcount == 0:
        await connection.execute(insert(table).values({key_column.name: key, **values}))
