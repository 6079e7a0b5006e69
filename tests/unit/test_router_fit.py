"""The router's fit check counts the room of deployments whose replicas its pool view does not show yet."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging

from corral.core.deployment_spec import DeploymentSpec
from corral.core.serving import Catalog, DeploymentFacts, DeploymentState, Endpoint
from corral.scheduling.placement import WorkerRoom
from corral.serving import router as router_module
from corral.serving.policies import FitPolicy
from corral.serving.pool import Holding, Pool
from corral.serving.router import Router, request_of


def worker(cores: float) -> WorkerRoom:
    return WorkerRoom("w1", "w1", cpu=cores, memory=2**30, gpu=0, free_cpu=cores, free_memory=2**30,
                      custom={"tpu": 1.0}, free_custom={"tpu": 1.0})


def router_with(replicas: dict[str, int], holdings: dict[str, int], resources: dict[str, dict] | None = None,
                cores: float = 1.0, leaving: dict[str, int] | None = None) -> Router:
    """Deployments of one core each (unless `resources` says otherwise) on a worker of `cores`;
    `holdings`: the replicas the pool view shows placed, and `leaving` those it shows on their way out."""
    router = Router(backend=None, policy=FitPolicy())
    facts = {name: DeploymentFacts(i, name, DeploymentSpec(
        name=name, command=["serve"], min_replicas=0, resources=(resources or {}).get(name, {"cpu": 1})),
        DeploymentState.READY, 0.0, count) for i, (name, count) in enumerate(replicas.items(), start=1)}
    router.publish(Catalog(facts, {name: (Endpoint(1, "127.0.0.1:1"),) for name, n in replicas.items() if n}))
    room = worker(cores)
    shown: dict[str, list[Holding]] = {}
    for on_its_way_out, counts in ((False, holdings), (True, leaving or {})):
        for name, count in counts.items():
            request = request_of(facts[name])
            shown.setdefault(name, []).extend([Holding("w1", request, leaving=on_its_way_out)] * count)
            for _ in range(count):
                room.take(request)
    router.pool_view = Pool([room], shown)
    return router


def test_a_deployment_loaded_since_the_pool_was_read_is_evicted_to_make_room():
    router = router_with({"left": 1, "right": 0}, holdings={})  # left's replica placed after the last read
    assert not router.fits("right", frozenset(), frozenset())
    assert router.fits("right", frozenset({"left"}), frozenset())
    fits = functools.partial(router.fits, "right", loading=frozenset())
    assert FitPolicy().evict_for("right", ["left"], fits) == ["left"]


def test_a_loaded_deployment_the_view_shows_is_counted_once():
    router = router_with({"left": 1, "right": 0}, holdings={"left": 1}, cores=2)  # one core left for right
    assert router.fits("right", frozenset(), frozenset())
    router = router_with({"left": 2, "right": 0}, holdings={"left": 1}, cores=2)  # left's second takes the other
    assert not router.fits("right", frozenset(), frozenset())


def test_a_deployment_being_unloaded_reserves_nothing_more():
    router = router_with({"left": 1, "right": 0}, holdings={})
    router.scheduler.unloading.add("left")
    assert router.fits("right", frozenset(), frozenset())


def test_a_loaded_deployment_whose_replica_fits_nowhere_blocks_nothing():
    router = router_with({"big": 1, "small": 0}, holdings={},
                         resources={"big": {"cpu": 0.5, "gpu": 1}, "small": {"cpu": 0.5}})  # no worker has a GPU
    assert router.fits("small", frozenset(), frozenset())
    assert FitPolicy().evict_for("small", ["big"], functools.partial(router.fits, "small", loading=frozenset())) == []


def test_the_targets_old_replica_still_shown_does_not_count_as_loaded():
    """Right was just loaded in left's place; a view read before the swap shows left's old replica, not right's."""
    router = router_with({"left": 0, "right": 1}, holdings={"left": 1})
    assert not router.fits("left", frozenset(), frozenset())
    fits = functools.partial(router.fits, "left", loading=frozenset())
    assert FitPolicy().evict_for("left", ["right"], fits) == ["right"]


def test_a_replica_on_its_way_out_frees_its_room_and_is_not_counted_as_placed():
    router = router_with({"left": 0, "right": 0}, holdings={}, leaving={"left": 1})  # left was unloaded
    assert router.fits("right", frozenset(), frozenset())  # no eviction: the room frees by itself
    router = router_with({"left": 1, "right": 0}, holdings={}, leaving={"left": 1})  # left's replacement is wanted
    assert not router.fits("right", frozenset(), frozenset())
    assert router.fits("right", frozenset({"left"}), frozenset())


def test_custom_slots_count_like_cpus_and_memory():
    tpu = {"cpu": 0.25, "custom": {"tpu": 1}}  # the worker has one tpu slot and a core
    router = router_with({"left": 1, "right": 0}, holdings={"left": 1}, resources={"left": tpu, "right": tpu})
    assert not router.fits("right", frozenset(), frozenset())
    assert router.fits("right", frozenset({"left"}), frozenset())
    router = router_with({"left": 1, "right": 0}, holdings={}, resources={"left": tpu, "right": tpu})
    assert not router.fits("right", frozenset(), frozenset())  # left's wanted replica takes the slot


def test_the_pool_reaches_a_standalone_router_as_it_is():
    router = router_with({"left": 1, "right": 0}, holdings={"right": 1}, leaving={"left": 1},
                         resources={"left": {"cpu": 0.25, "custom": {"tpu": 1}}, "right": {"cpu": 0.5}})
    pool = router.pool_view
    assert Pool.from_json(**json.loads(json.dumps(pool.to_json()))) == pool


class FlakyBackend:
    """A controller whose pool read fails `fails` times, then answers."""

    def __init__(self, fails: int) -> None:
        self.fails, self.reads, self.done = fails, 0, asyncio.Event()

    async def pool(self) -> Pool:
        self.reads += 1
        if self.reads <= self.fails:
            raise RuntimeError("the controller is away")
        self.done.set()
        return Pool([worker(1.0)])

    async def report_load(self, loads) -> None:
        pass


async def test_a_pool_that_cannot_be_read_is_said_once_and_the_router_keeps_ticking(caplog, monkeypatch):
    monkeypatch.setattr(router_module, "TICK", 0)
    caplog.set_level(logging.INFO, logger="corral.router")
    backend = FlakyBackend(fails=3)
    router = Router(backend=backend, policy=FitPolicy())
    ticking = asyncio.create_task(router.run())
    async with asyncio.timeout(10):
        await backend.done.wait()
    ticking.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await ticking
    said = [r.getMessage() for r in caplog.records if r.name == "corral.router"]
    assert said == ["cannot refresh the pool (fit decisions use the last one): the controller is away",
                    "the pool is read again"]
    assert [room.id for room in router.pool_view.rooms] == ["w1"]
