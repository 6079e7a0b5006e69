"""The registry of controllers in the store: a controller's row registered, refreshed, listed and pruned."""

from __future__ import annotations

from dataclasses import replace

from corral.store.cluster_state import ControllerRow, list_controllers, prune_controllers, register_controller

FIRST = ControllerRow("host:1:100", "http://127.0.0.1:1", 1, "host", "1.0", 100.0, 100.0, {}, None)


async def test_a_refresh_takes_the_url_seen_at_handlers_and_last_pass_and_keeps_the_rest(store):
    async with store.write() as connection:
        await register_controller(connection, FIRST)
        await register_controller(connection, replace(
            FIRST, url="http://127.0.0.1:2", pid=2, host="other", version="2.0", started_at=150.0, seen_at=200.0,
            handlers={"ScheduleJobs": 199.5}, last_pass_at=198.0))
        rows = await list_controllers(connection)
    assert rows == [replace(FIRST, url="http://127.0.0.1:2", seen_at=200.0, handlers={"ScheduleJobs": 199.5},
                            last_pass_at=198.0)]


async def test_a_controller_silent_since_the_prune_is_forgotten(store):
    async with store.write() as connection:
        await register_controller(connection, FIRST)
        await register_controller(connection, replace(FIRST, id="host:2:100", seen_at=300.0))
        assert await prune_controllers(connection, 200.0) == 1
        assert [row.id for row in await list_controllers(connection)] == ["host:2:100"]


async def test_a_refresh_makes_no_statement_the_first_one_made(store, statements_made):
    """Every controller refreshes its row once a second: made afresh, a statement cost more to build and to walk
    for SQLAlchemy's cache key than to run."""
    for _ in range(2):  # the first may make the dialect's upsert, once for the process
        statements_made.clear()
        async with store.write() as connection:
            await list_controllers(connection)
            await register_controller(connection, FIRST)
            await prune_controllers(connection, 0.0)
    made_here = [made for made in statements_made if made.startswith("corral.store.cluster_state:")]
    assert made_here == [], made_here
