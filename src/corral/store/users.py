"""Users, their memberships and their personal tokens in the store.

A personal token is shown once, when made; the store keeps its sha256 and its first characters (to tell tokens
apart in a listing). A token is good while it is not revoked, not expired and its user is not disabled; the lookup
checks all three on every request, so a revoke holds for the very next one.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.keys import key_hash
from corral.core.roles import Role
from corral.store.schema import memberships, user_tokens, users


@dataclass(frozen=True)
class UserRecord:
    id: int
    name: str
    cluster_admin: bool
    unix_user: str | None
    created_at: float
    disabled_at: float | None
    projects: dict[str, Role]


@dataclass(frozen=True)
class TokenHolder:
    """Who a good personal token belongs to, and which token it is."""

    token_id: int
    expires_at: float | None
    last_used_at: float | None
    user: UserRecord


async def insert_user(connection: AsyncConnection, name: str, cluster_admin: bool, unix_user: str | None,
                      projects: dict[str, Role], now: float) -> int:
    """A name already taken breaks its uniqueness: IntegrityError."""
    user_id = (await connection.execute(insert(users).values(
        name=name, cluster_admin=cluster_admin, unix_user=unix_user, created_at=now,
    ).returning(users.c.id))).scalar_one()
    for project, role in projects.items():
        await put_membership(connection, user_id, project, role, now)
    return user_id


async def update_user(connection: AsyncConnection, user_id: int, **values) -> None:
    """`values`: cluster_admin, unix_user, disabled_at (columns of `users`)."""
    if values:
        await connection.execute(update(users).where(users.c.id == user_id).values(**values))


async def user_by_name(connection: AsyncConnection, name: str) -> UserRecord | None:
    found = await _users(connection, users.c.name == name)
    return found[0] if found else None


async def all_users(connection: AsyncConnection) -> list[UserRecord]:
    return await _users(connection, None)


async def _users(connection: AsyncConnection, condition) -> list[UserRecord]:
    query = select(users).order_by(users.c.name)
    if condition is not None:
        query = query.where(condition)
    rows = (await connection.execute(query)).all()
    if not rows:
        return []
    roles: dict[int, dict[str, Role]] = {row.id: {} for row in rows}
    for member in (await connection.execute(select(memberships).where(
            memberships.c.user_id.in_(list(roles))).order_by(memberships.c.project))).all():
        roles[member.user_id][member.project] = Role(member.role)
    return [UserRecord(row.id, row.name, row.cluster_admin, row.unix_user, row.created_at, row.disabled_at,
                       roles[row.id]) for row in rows]


async def put_membership(connection: AsyncConnection, user_id: int, project: str, role: Role, now: float) -> None:
    await connection.execute(delete(memberships).where(memberships.c.user_id == user_id,
                                                       memberships.c.project == project))
    await connection.execute(insert(memberships).values(user_id=user_id, project=project, role=str(role),
                                                        updated_at=now))


async def delete_membership(connection: AsyncConnection, user_id: int, project: str) -> bool:
    """False when the user was not a member of the project."""
    return (await connection.execute(delete(memberships).where(
        memberships.c.user_id == user_id, memberships.c.project == project))).rowcount > 0


async def project_members(connection: AsyncConnection, project: str) -> list[tuple[str, Role]]:
    """(name, role) of the project's members, by name."""
    rows = (await connection.execute(
        select(users.c.name, memberships.c.role).join(memberships, memberships.c.user_id == users.c.id)
        .where(memberships.c.project == project).order_by(users.c.name))).all()
    return [(row.name, Role(row.role)) for row in rows]


async def insert_token(connection: AsyncConnection, user_id: int, name: str, token: str, now: float,
                       expires_at: float | None) -> int:
    return (await connection.execute(insert(user_tokens).values(
        user_id=user_id, name=name, token_hash=key_hash(token), prefix=token[:12], created_at=now,
        expires_at=expires_at,
    ).returning(user_tokens.c.id))).scalar_one()


async def token_rows(connection: AsyncConnection, user_id: int | None) -> list:
    """Rows (id, user, name, prefix, created_at, expires_at, revoked_at, last_used_at) of one user's tokens (or
    everyone's), oldest first: never the hashes."""
    query = (select(user_tokens.c.id, users.c.name.label("user"), user_tokens.c.name, user_tokens.c.prefix,
                    user_tokens.c.created_at, user_tokens.c.expires_at, user_tokens.c.revoked_at,
                    user_tokens.c.last_used_at)
             .join(users, users.c.id == user_tokens.c.user_id).order_by(user_tokens.c.id))
    if user_id is not None:
        query = query.where(user_tokens.c.user_id == user_id)
    return list((await connection.execute(query)).all())


async def token_owner(connection: AsyncConnection, token_id: int) -> str | None:
    """The name of the user whose token this is; None when there is no such token."""
    return (await connection.execute(select(users.c.name).join(user_tokens, user_tokens.c.user_id == users.c.id)
                                     .where(user_tokens.c.id == token_id))).scalar_one_or_none()


async def revoke_user_token(connection: AsyncConnection, token_id: int, now: float) -> bool:
    """False when there is no such token or it was revoked already."""
    return (await connection.execute(update(user_tokens).where(
        user_tokens.c.id == token_id, user_tokens.c.revoked_at.is_(None)).values(revoked_at=now))).rowcount > 0


async def holder_of(connection: AsyncConnection, token: str, now: float) -> TokenHolder | None:
    """The user of a good personal token (not revoked, not expired, user not disabled); else None."""
    row = (await connection.execute(
        select(user_tokens.c.id.label("token_id"), user_tokens.c.expires_at, user_tokens.c.last_used_at, users)
        .join(users, users.c.id == user_tokens.c.user_id)
        .where(user_tokens.c.token_hash == key_hash(token), user_tokens.c.revoked_at.is_(None),
               or_(user_tokens.c.expires_at.is_(None), user_tokens.c.expires_at > now),
               users.c.disabled_at.is_(None)))).first()
    if row is None:
        return None
    roles = {member.project: Role(member.role) for member in (await connection.execute(
        select(memberships.c.project, memberships.c.role).where(memberships.c.user_id == row.id))).all()}
    user = UserRecord(row.id, row.name, row.cluster_admin, row.unix_user, row.created_at, row.disabled_at, roles)
    return TokenHolder(row.token_id, row.expires_at, row.last_used_at, user)


async def mark_used(connection: AsyncConnection, token_id: int, now: float) -> None:
    await connection.execute(update(user_tokens).where(user_tokens.c.id == token_id).values(last_used_at=now))
