"""The registry ends the channels a gone controller held, looking for them only when one may be left: at its
first refresh, when a controller it saw alive is gone, and once per RELAY_SWEEP; not at every refresh."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from sqlalchemy import insert, select

from corral.controller import registry as registry_module
from corral.controller.registry import GONE_AFTER, RELAY_SWEEP, Registry
from corral.store.attachments import LIVE
from corral.store.cluster_state import ControllerRow, register_controller
from corral.store.schema import attachments
from tests.store.conftest import store as store  # noqa: F401 (the fixture: a SQLite file, then PostgreSQL)

OTHER = "http://10.0.0.2:8265"


@pytest.fixture
def looks(monkeypatch) -> list[int]:
    """One entry per read of the channels' holders."""
    seen: list[int] = []
    read = registry_module.live_relay_holders

    async def counted(connection):
        seen.append(1)
        return await read(connection)

    monkeypatch.setattr(registry_module, "live_relay_holders", counted)
    return seen


async def other_controller(store, seen_at: float) -> None:
    async with store.write() as connection:
        await register_controller(connection, ControllerRow("other", OTHER, 1, "other", "0", seen_at - 100, seen_at,
                                                            {}, None))


async def channel_held_by(store, url: str) -> None:
    async with store.write() as connection:
        await connection.execute(insert(attachments).values(
            session=f"s-{url}", job_id=1, task_id=1, task_index=0, attempt=1, worker_id="w", kind="terminal",
            detail={"url": url}, actor="admin", state="open", opened_at=time.time()))


async def live_channels(store) -> int:
    async with store.read() as connection:
        return len((await connection.execute(select(attachments.c.id).where(attachments.c.state.in_(LIVE)))).all())


def a_registry(store) -> Registry:
    return Registry(store, SimpleNamespace(handler_runs={}, last_pass_at=None), "http://10.0.0.1:8265", "0")


async def test_the_channels_are_looked_at_only_when_a_controller_may_have_left_some(store, looks):
    await other_controller(store, time.time())
    await channel_held_by(store, OTHER)
    registry = a_registry(store)
    await registry.refresh()
    assert looks == [1]  # the first refresh looks: a controller gone before this one started
    await registry.refresh()
    await registry.refresh()
    assert looks == [1] and await live_channels(store) == 1  # nobody left: no look
    await other_controller(store, time.time() - GONE_AFTER - 1)  # the other one falls silent
    await registry.refresh()
    assert looks == [1, 1] and await live_channels(store) == 0  # its channel is ended
    await registry.refresh()
    assert looks == [1, 1]


async def test_a_channel_of_a_controller_never_seen_alive_is_ended_by_the_sweep(store, looks):
    registry = a_registry(store)
    await registry.refresh()
    await channel_held_by(store, OTHER)  # held by a controller that went before it registered
    await registry.refresh()
    assert looks == [1] and await live_channels(store) == 1
    registry._swept_at -= RELAY_SWEEP
    await registry.refresh()
    assert looks == [1, 1] and await live_channels(store) == 0


async def test_a_controller_that_joined_and_left_between_looks_is_noticed(store, looks):
    registry = a_registry(store)
    await registry.refresh()
    await other_controller(store, time.time())
    await registry.refresh()  # it joined: nothing to look for
    await channel_held_by(store, OTHER)
    await other_controller(store, time.time() - GONE_AFTER - 1)
    await registry.refresh()
    assert looks == [1, 1] and await live_channels(store) == 0
