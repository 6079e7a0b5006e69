"""Reads that took the event loop hundreds of milliseconds at a time at a thousand workers, while long polls were
due, run their pure CPU off it: a batch of heartbeats' orders (each spec parsed, each order validated) and the
workers' rows."""

from __future__ import annotations

import threading

from sqlalchemy.engine import Result

from corral.controller import orders as orders_module
from corral.controller.orders import orders_of
from corral.store.workers import worker_rows
from tests.store.helpers import add_worker, settle, submit


async def test_the_rows_are_read_and_the_orders_built_off_the_loops_thread(store, monkeypatch):
    worker = await add_worker(store, cpu=4.0)
    await submit(store, replicas=2, resources={"cpu": 1})
    await settle(store)
    threads: dict[str, set[int]] = {"rows": set(), "orders": set()}
    read_rows, task_env = Result.all, orders_module.task_env

    def watched_rows(result):
        threads["rows"].add(threading.get_ident())
        return read_rows(result)

    def watched_env(*args):
        threads["orders"].add(threading.get_ident())
        return task_env(*args)

    monkeypatch.setattr(orders_module, "task_env", watched_env)
    async with store.read() as connection:
        monkeypatch.setattr(Result, "all", watched_rows)
        orders = (await orders_of(connection, [worker]))[worker]
        monkeypatch.undo()
    assert [order.action for order in orders] == ["build", "build"]
    loop = threading.get_ident()
    assert threads["rows"] and threads["orders"] and loop not in threads["rows"] | threads["orders"]


async def test_the_workers_rows_are_read_off_the_loops_thread(store, monkeypatch):
    """The cluster's samples read every worker's row (its JSON columns parsed) every 10 s."""
    await add_worker(store, cpu=4.0)
    threads = set()
    read_rows = Result.all

    def watched_rows(result):
        threads.add(threading.get_ident())
        return read_rows(result)

    async with store.read() as connection:
        monkeypatch.setattr(Result, "all", watched_rows)
        rows = await worker_rows(connection)
        monkeypatch.undo()
    assert len(rows) == 1 and threads and threading.get_ident() not in threads
