"""Project tokens over a real store (SQLite and PostgreSQL): hashes only, one owner per token, and the router's view."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from corral.core.deployment_spec import DeploymentSpec
from corral.core.keys import key_hash
from corral.store.deployments import insert_deployment, read_snapshot
from corral.store.project_tokens import issue_token, list_tokens, revoke_token, token_hashes
from corral.store.schema import project_tokens
from tests.store.helpers import NOW


async def test_tokens_are_kept_as_hashes_listed_by_project_and_revoked_by_id(store):
    async with store.write() as connection:
        first = await issue_token(connection, "team-a", "token-one-for-team-a", NOW)
        second = await issue_token(connection, "team-a", "token-two-for-team-a", NOW + 1)
        other = await issue_token(connection, "team-b", "token-for-team-b-only", NOW)
    async with store.read() as connection:
        stored = (await connection.execute(select(project_tokens.c.token_hash))).scalars().all()
        assert sorted(stored) == sorted(key_hash(t) for t in
                                        ("token-one-for-team-a", "token-two-for-team-a", "token-for-team-b-only"))
        assert [(r.id, r.project, r.created_at) for r in await list_tokens(connection, "team-a")] == [
            (first, "team-a", NOW), (second, "team-a", NOW + 1)]
        assert await token_hashes(connection, ["team-a", "team-b", "nobody"]) == {
            "team-a": (key_hash("token-one-for-team-a"), key_hash("token-two-for-team-a")),
            "team-b": (key_hash("token-for-team-b-only"),)}
        assert await token_hashes(connection, []) == {}
    async with store.write() as connection:
        assert not await revoke_token(connection, "team-a", other)  # another project's id
        assert await revoke_token(connection, "team-a", first)
        assert not await revoke_token(connection, "team-a", first)
    async with store.read() as connection:
        assert [r.id for r in await list_tokens(connection, "team-a")] == [second]
        assert [r.id for r in await list_tokens(connection, "team-b")] == [other]


async def test_a_token_issued_twice_is_refused_and_nothing_is_stored(store):
    async with store.write() as connection:
        await issue_token(connection, "team-a", "one-token-for-all", NOW)
    with pytest.raises(IntegrityError):
        async with store.write() as connection:
            await issue_token(connection, "team-b", "one-token-for-all", NOW)
    async with store.read() as connection:
        assert await list_tokens(connection, "team-b") == []
        assert len(await list_tokens(connection, "team-a")) == 1


async def test_the_serving_snapshot_gives_each_deployment_its_own_projects_tokens(store):
    async with store.write() as connection:
        await issue_token(connection, "team-a", "token-one-for-team-a", NOW)
        await insert_deployment(connection, DeploymentSpec(name="a", command=["x"], project="team-a"), ["own-key"], NOW)
        await insert_deployment(connection, DeploymentSpec(name="b", command=["x"], project="team-b"), [], NOW)
        await insert_deployment(connection, DeploymentSpec(name="d", command=["x"]), [], NOW)
    async with store.read() as connection:
        snapshot = await read_snapshot(connection, NOW, {})
    facts = {f.name: f for f in snapshot.deployments.values()}
    assert facts["a"].project_key_hashes == (key_hash("token-one-for-team-a"),)
    assert facts["a"].key_hashes == (key_hash("own-key"),)  # its own keys stay apart
    assert facts["b"].project_key_hashes == () and facts["d"].project_key_hashes == ()
