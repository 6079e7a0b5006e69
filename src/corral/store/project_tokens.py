"""Project tokens in the store: only their hashes are kept; the token itself is shown once, when issued."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.keys import key_hash
from corral.store.schema import project_tokens


async def issue_token(connection: AsyncConnection, project: str, token: str, now: float, owner: str = "admin") -> int:
    """Store the hash of `token` for `project`; its id names it for listing and revoking.

    A token already issued (to any project) breaks the uniqueness of its hash: IntegrityError.
    """
    return (await connection.execute(insert(project_tokens).values(
        project=project, token_hash=key_hash(token), created_at=now, owner=owner,
    ).returning(project_tokens.c.id))).scalar_one()


async def list_tokens(connection: AsyncConnection, project: str) -> list:
    """Rows (id, project, created_at) of the project's tokens, oldest first: never the hashes."""
    return list((await connection.execute(
        select(project_tokens.c.id, project_tokens.c.project, project_tokens.c.created_at)
        .where(project_tokens.c.project == project).order_by(project_tokens.c.id))).all())


async def revoke_token(connection: AsyncConnection, project: str, token_id: int) -> bool:
    """False when the project has no token of that id."""
    return (await connection.execute(delete(project_tokens).where(
        project_tokens.c.project == project, project_tokens.c.id == token_id))).rowcount > 0


async def token_hashes(connection: AsyncConnection, projects: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """The hashes of each project's tokens, for the projects named."""
    found: dict[str, list[str]] = {}
    wanted = sorted(set(projects))
    if not wanted:
        return {}
    for row in (await connection.execute(
            select(project_tokens.c.project, project_tokens.c.token_hash)
            .where(project_tokens.c.project.in_(wanted)).order_by(project_tokens.c.id))).all():
        found.setdefault(row.project, []).append(row.token_hash)
    return {project: tuple(hashes) for project, hashes in found.items()}
