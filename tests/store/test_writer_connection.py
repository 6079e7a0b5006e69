"""The single writer has a connection of its own: a write never waits for one behind the reads, which would hold
every write queued behind the write lock as long."""

from __future__ import annotations

import asyncio

from corral.store.database import ONE_CONNECTION, make_engine
from corral.store.store import Store
from tests.store.helpers import NOW, add_worker


async def test_a_write_goes_through_while_every_reading_connection_is_taken(store):
    assert store.writer is not store.engine
    url = store.engine.url.render_as_string(hide_password=False)
    one_reader = Store(make_engine(url, ONE_CONNECTION), make_engine(url, ONE_CONNECTION))
    try:
        async with one_reader.read():  # the only reading connection, held
            await asyncio.wait_for(add_worker(one_reader, "w", now=NOW), 10)
    finally:
        await one_reader.close()
