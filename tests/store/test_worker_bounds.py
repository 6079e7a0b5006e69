"""A registration costs the controller no more than a real machine, on both stores."""

from __future__ import annotations

from sqlalchemy import update

from corral.core.spec import MAX_GPU
from corral.store.scheduling_reads import read_cluster
from corral.store.schema import workers
from tests.store.helpers import add_worker


async def test_a_long_worker_name_still_makes_an_id_the_store_holds(store):
    worker_id = await add_worker(store, name="n" * 200)
    assert len(worker_id) <= 64 and worker_id.startswith("n" * 57 + "-")


async def test_a_stored_absurd_gpu_count_costs_no_more_than_a_real_machine(store):
    worker_id = await add_worker(store, gpu=2)
    async with store.write() as connection:  # as a registration from before the bound could have left it
        await connection.execute(update(workers).where(workers.c.id == worker_id).values(gpu=10**7))
    async with store.read() as connection:
        [room] = (await read_cluster(connection)).rooms
    assert room.gpu == MAX_GPU and len(room.free_gpu_ids) == MAX_GPU
