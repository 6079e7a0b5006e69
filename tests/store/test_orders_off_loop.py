"""Reads that took the event loop hundreds of milliseconds at a time at a thousand workers, while long polls were
due, run their pure CPU off it: a batch of heartbeats' orders (each spec parsed, each order validated) and the
workers' rows. A small read (one worker's few orders) stays on the loop: a hop to a thread would delay every order
it carries. The tests set the bound between the two (ON_LOOP) below or above the rows they make."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy.engine import Result

from corral.controller import orders as orders_module
from corral.controller.orders import orders_of
from corral.store import off_loop
from corral.store.workers import worker_rows
from tests.store.helpers import add_worker, settle, submit


def threads_of(monkeypatch) -> dict[str, set[int]]:
    """The threads that read rows (Result.all, past the first ON_LOOP) and built orders (task_env), from now on."""
    threads: dict[str, set[int]] = {"rows": set(), "orders": set()}
    read_rows, task_env = Result.all, orders_module.task_env

    def watched_rows(result):
        threads["rows"].add(threading.get_ident())
        return read_rows(result)

    def watched_env(*args):
        threads["orders"].add(threading.get_ident())
        return task_env(*args)

    monkeypatch.setattr(orders_module, "task_env", watched_env)
    monkeypatch.setattr(Result, "all", watched_rows)
    return threads


@pytest.mark.parametrize("on_loop", [1, off_loop.ON_LOOP])
async def test_a_batch_of_orders_is_read_and_built_off_the_loop_and_a_small_one_on_it(store, monkeypatch, on_loop):
    monkeypatch.setattr(off_loop, "ON_LOOP", on_loop)
    worker = await add_worker(store, cpu=4.0)
    await submit(store, replicas=2, resources={"cpu": 1})
    await settle(store)
    async with store.read() as connection:
        threads = threads_of(monkeypatch)
        orders = (await orders_of(connection, [worker]))[worker]
        monkeypatch.undo()
    assert [order.action for order in orders] == ["build", "build"]
    loop = threading.get_ident()
    if on_loop == 1:  # two rows are a batch: both read and built in a thread
        assert threads["rows"] and threads["orders"] and loop not in threads["rows"] | threads["orders"]
    else:
        assert threads["rows"] == set() and threads["orders"] == {loop}


async def test_the_workers_rows_are_read_off_the_loops_thread(store, monkeypatch):
    """The cluster's samples read every worker's row (its JSON columns parsed) every 10 s."""
    monkeypatch.setattr(off_loop, "ON_LOOP", 1)
    await add_worker(store, cpu=4.0)
    await add_worker(store, cpu=2.0)
    async with store.read() as connection:
        threads = threads_of(monkeypatch)["rows"]
        rows = await worker_rows(connection)
        monkeypatch.undo()
    assert len(rows) == 2 and threads and threading.get_ident() not in threads
