"""The cluster's tokens live in the store: seeded once (from the settings, else tokens.json, else new), then the
same for every controller of the store; a controller given another one refuses to start."""

from __future__ import annotations

import json

import pytest

from corral.controller.settings import ControllerSettings, TokenMismatch, Tokens, settle_tokens
from corral.store.cluster_state import seed_settings
from corral.store.store import Store


async def test_the_first_start_seeds_the_tokens_and_later_ones_take_them(tmp_path):
    first = ControllerSettings(data_dir=tmp_path / "a", db_url=f"sqlite:///{tmp_path}/corral.db")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "tokens.json").write_text(json.dumps({"admin": "from-file", "join": "join-file"}))
    assert await settle_tokens(first) == Tokens("from-file", "join-file")
    # Another data directory on the same store: the store's tokens, written to its tokens.json for local clients.
    second = ControllerSettings(data_dir=tmp_path / "b", db_url=first.db_url)
    assert await settle_tokens(second) == Tokens("from-file", "join-file")
    assert json.loads((tmp_path / "b" / "tokens.json").read_text()) == {"admin": "from-file", "join": "join-file"}
    assert await settle_tokens(ControllerSettings(data_dir=tmp_path / "b", db_url=first.db_url,
                                                  admin_token="from-file")) == Tokens("from-file", "join-file")
    with pytest.raises(TokenMismatch) as refused:
        await settle_tokens(ControllerSettings(data_dir=tmp_path / "b", db_url=first.db_url, admin_token="other"))
    assert str(refused.value).startswith(f"CORRAL_ADMIN_TOKEN is not the admin token the store sqlite+aiosqlite:///"
                                         f"{tmp_path}/corral.db holds")
    assert "start without CORRAL_ADMIN_TOKEN set" in str(refused.value)


async def test_a_second_seed_gives_way_to_the_first(tmp_path):
    store = await Store.open(f"sqlite:///{tmp_path}/corral.db")
    try:
        for proposed in ({"admin_token": "first"}, {"admin_token": "second", "join_token": "join"}):
            async with store.write() as connection:
                seeded = await seed_settings(connection, proposed)
        assert seeded == {"admin_token": "first", "join_token": "join"}
    finally:
        await store.close()
