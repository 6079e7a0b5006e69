"""A build order's run_as is its job owner's local account (users.unix_user), read with the tasks in one query."""

from __future__ import annotations

import json

from sqlalchemy import update

from corral.controller.orders import orders_of
from corral.store.schema import jobs, users
from tests.store.helpers import NOW, add_worker, settle, submit


async def test_a_build_runs_as_its_owners_local_account_and_as_the_worker_otherwise(store):
    worker = await add_worker(store, cpu=8.0)
    owners = {"alice": "alice_unix", "bob": None, "admin": "root", "gone": None}  # gone: no users row
    job_of = {}
    for owner in owners:
        job_of[owner] = await submit(store, name=owner, resources={"cpu": 1})
    async with store.write() as connection:
        await connection.execute(users.insert(), [dict(name=name, cluster_admin=False, unix_user=unix_user,
                                                       created_at=NOW)
                                                  for name, unix_user in owners.items() if name != "gone"])
        for owner, job in job_of.items():
            await connection.execute(update(jobs).where(jobs.c.id == job).values(owner=owner))
    await settle(store)
    async with store.read() as connection:
        orders = (await orders_of(connection, [worker]))[worker]
    run_as = {order.job_id: order.run_as for order in orders if order.action == "build"}
    # the admin token's jobs run as the worker, even where a user named "admin" has an account
    assert run_as == {job_of["alice"]: "alice_unix", job_of["bob"]: None, job_of["admin"]: None,
                      job_of["gone"]: None}


async def test_a_reads_builds_parse_each_jobs_spec_once_and_held_builds_none(store, monkeypatch):
    """Every task row of a wave carries its job's spec: it is parsed once a job, and only for orders that carry it."""
    worker = await add_worker(store, cpu=8.0)
    first, second = await submit(store, replicas=3), await submit(store, replicas=2, env={"WHICH": "second"})
    await settle(store)
    parsed: list[str] = []
    loads = json.loads

    def counted(text, *args, **kwargs):
        if '"command"' in str(text):  # a spec (SQLAlchemy's JSON columns are parsed by json.loads too)
            parsed.append(text)
        return loads(text, *args, **kwargs)

    monkeypatch.setattr(json, "loads", counted)
    async with store.read() as connection:
        orders = (await orders_of(connection, [worker]))[worker]
        assert len(parsed) == 2  # five builds, two jobs
        assert {order.job_id: order.env.get("WHICH") for order in orders} == {first: None, second: "second"}
        parsed.clear()
        held = {worker: {(order.task_id, order.attempt) for order in orders}}
        assert (await orders_of(connection, [worker], holding=held))[worker] == []
    assert parsed == []  # every build held: no spec needed
