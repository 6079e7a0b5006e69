"""Users, memberships and personal tokens over a real store (SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from corral.core.keys import key_hash
from corral.core.roles import Role
from corral.store.schema import user_tokens
from corral.store.users import (
    delete_membership,
    holder_of,
    insert_token,
    insert_user,
    project_members,
    put_membership,
    revoke_user_token,
    token_rows,
    update_user,
    user_by_name,
)
from tests.store.helpers import NOW


async def test_a_token_is_good_until_revoked_expired_or_its_user_disabled(store):
    async with store.write() as connection:
        alice = await insert_user(connection, "alice", False, "alice", {"vision": Role.MEMBER}, NOW)
        forever = await insert_token(connection, alice, "laptop", "cu_forever", NOW, None)
        await insert_token(connection, alice, "ci", "cu_short", NOW, NOW + 60)
    async with store.read() as connection:
        holder = await holder_of(connection, "cu_forever", NOW)
        assert (holder.token_id, holder.user.name, holder.user.projects) == (forever, "alice", {"vision": "member"})
        assert await holder_of(connection, "cu_short", NOW + 59) is not None
        assert await holder_of(connection, "cu_short", NOW + 60) is None
        assert await holder_of(connection, "cu_unknown", NOW) is None
        assert (await connection.execute(select(user_tokens.c.token_hash))).scalars().all() == [
            key_hash("cu_forever"), key_hash("cu_short")]
    async with store.write() as connection:
        assert await revoke_user_token(connection, forever, NOW + 1)
        assert not await revoke_user_token(connection, forever, NOW + 2)
    async with store.read() as connection:
        assert await holder_of(connection, "cu_forever", NOW + 1) is None
        assert [r.revoked_at for r in await token_rows(connection, alice)] == [NOW + 1, None]
    async with store.write() as connection:
        await update_user(connection, alice, disabled_at=NOW + 3)
    async with store.read() as connection:
        assert await holder_of(connection, "cu_short", NOW + 4) is None


async def test_memberships_change_and_names_are_unique(store):
    async with store.write() as connection:
        bob = await insert_user(connection, "bob", False, None, {}, NOW)
        await put_membership(connection, bob, "vision", Role.VIEWER, NOW)
        await put_membership(connection, bob, "vision", Role.PROJECT_ADMIN, NOW)
    async with store.read() as connection:
        assert await project_members(connection, "vision") == [("bob", Role.PROJECT_ADMIN)]
        assert (await user_by_name(connection, "bob")).projects == {"vision": Role.PROJECT_ADMIN}
    async with store.write() as connection:
        assert await delete_membership(connection, bob, "vision")
        assert not await delete_membership(connection, bob, "vision")
    with pytest.raises(IntegrityError):
        async with store.write() as connection:
            await insert_user(connection, "bob", True, None, {}, NOW)
