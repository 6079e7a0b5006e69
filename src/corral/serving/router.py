"""The router's machinery: the effects its scheduler acts through, swaps, in-flight tracking and endpoints.

All router state lives on one asyncio event loop: the proxy's request handlers call the
scheduler's `on_*` methods directly (they never await, so each runs whole, as one event), a
ticker delivers `on_tick`, and slow work (scaling deployments, waiting for a replica to be
healthy) runs in tasks that come back as `on_swap_done`. A `Backend` is how the router
reaches the controller: in-process inside it, or over the API for a standalone `corral router`.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import Protocol

from corral.core.autoscale import Decision, Sample, decide, trim
from corral.core.config import DEFAULT_SWAP_TIMEOUT
from corral.core.serving import Catalog, DeploymentFacts, Endpoint
from corral.metrics import (
    ROUTER_COLD_START,
    ROUTER_EVICTIONS,
    ROUTER_IN_FLIGHT,
    ROUTER_QUEUE_DEPTH,
)
from corral.scheduling.placement import Request
from corral.scheduling.rooms import custom_slots
from corral.serving.pool import Pool
from corral.serving.scheduler import Policy, Req, Scheduler, Served
from corral.serving.upstream import Upstream

log = logging.getLogger("corral.router")

TICK = 0.2  # how often idle timeouts, ageing and residency are looked at
POOL_REFRESH = 1.0  # the pool is read this often, and every tick while requests wait
LOAD_REPORT_FRESH = 3.0  # a standalone router's load report counts this long


class Backend(Protocol):
    async def scale(self, name: str, replicas: int, reason: str) -> None: ...
    async def pool(self) -> Pool: ...
    async def report_load(self, loads: dict[str, int]) -> None: ...


class RouterError(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(eq=False)
class Waiter:
    """A client waiting for a decision: the future gets the deployment to serve it, or a RouterError."""

    req: Req
    future: asyncio.Future
    since: float = field(default_factory=time.time)

    @functools.cached_property
    def positions(self) -> asyncio.Queue:
        """Queue positions as they change; made only for a request that waits."""
        return asyncio.Queue()


def served_from(facts: DeploymentFacts) -> Served:
    spec = facts.spec
    return Served(facts.name, spec.priority, spec.concurrency, spec.idle_timeout, spec.min_residency)


def wanted_when_loaded(facts: DeploymentFacts) -> int:
    return max(facts.spec.min_replicas, 1)


def request_of(facts: DeploymentFacts) -> Request:
    resources = facts.spec.resources
    return Request(resources.cpu, resources.memory, resources.gpu, custom_slots(resources.custom),
                   resources.gpu_memory or 0)


class Router:
    def __init__(self, backend: Backend, policy: Policy, *, max_wait: float = 60.0,
                 swap_timeout: float = DEFAULT_SWAP_TIMEOUT, autoscale: bool = False) -> None:
        self.backend = backend
        self.autoscale = autoscale  # one router decides (the controller's): two would fight over the count
        self.load_samples: dict[str, list[Sample]] = {}
        self.autoscaled: dict[str, Decision] = {}  # the latest decision per deployment, for the views
        self.reports: dict[str, tuple[float, dict[str, float]]] = {}  # standalone router -> (when, its loads)
        self._scaling: set[str] = set()
        self.swap_timeout = swap_timeout
        self.catalog = Catalog()
        self.models: dict[str, str] = {}  # model name -> deployment name
        self._served: dict[str, Served] = {}  # the scheduler's view of each deployment, made once per catalog
        self._gauged: set[str] = set()
        self.pool_view = Pool()
        self.scheduler = Scheduler(self, policy, max_wait=max_wait)
        self.waiters: dict[int, Waiter] = {}
        self.endpoint_load: dict[str, int] = {}  # address -> requests in flight there
        self._ids = itertools.count(1)
        self._turn = itertools.count()
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self.upstream = Upstream()  # kept-alive connections to the replicas
        # Gauges read when scraped: nothing to update on the request path.
        ROUTER_QUEUE_DEPTH.set_function(
            lambda: len(self.scheduler.queue) + sum(len(w) for w in self.scheduler.swaps.values()))

    # feeding it --------------------------------------------------------------------------

    def publish(self, catalog: Catalog) -> None:
        """A new view of the deployments and their healthy endpoints (ServiceDiscoverySync, or a poll)."""
        self.catalog = catalog
        self.models = {model: name for name, facts in catalog.deployments.items() for model in facts.spec.model_names}
        self._served = {name: served_from(facts) for name, facts in catalog.deployments.items()}
        for name in catalog.deployments.keys() - self._gauged:
            self._gauged.add(name)
            ROUTER_IN_FLIGHT.labels(name).set_function(functools.partial(self.scheduler.in_flight.get, name, 0))
        self._changed.set()

    async def run(self) -> None:
        """The ticker: time-driven events, and the pool refreshed for fit decisions."""
        try:
            refreshed = 0.0
            failing = False
            while True:
                waiting = self.scheduler.queue or self.scheduler.swaps
                if waiting or time.monotonic() - refreshed >= POOL_REFRESH:
                    try:
                        self.pool_view = await self.backend.pool()
                        refreshed = time.monotonic()
                        if not self.autoscale:
                            await self.backend.report_load({name: self.load(name) for name in self.catalog.deployments})
                    except Exception as error:  # the controller is away, or its answer is broken: keep ticking
                        if not failing:
                            log.warning("cannot refresh the pool (fit decisions use the last one): %s", error)
                        failing = True
                    else:
                        if failing:
                            log.info("the pool is read again")
                        failing = False
                self.scheduler.on_tick(time.time())
                if self.autoscale:
                    self._autoscale(time.time())
                await asyncio.sleep(TICK)
        finally:
            self.scheduler.on_shutdown("the router is shutting down")
            for task in self._tasks:
                task.cancel()
            await self.upstream.close()

    # the proxy's side ----------------------------------------------------------------------

    def deployment_for_model(self, model: str) -> str | None:
        return self.models.get(model)

    def submit(self, deployment: str, loop: asyncio.AbstractEventLoop | None = None) -> Waiter:
        """A new request's waiter, decided at once when it can be. `loop` is the running loop, if the caller
        holds it: asking for it costs a system call on every request."""
        waiter = Waiter(Req(next(self._ids), deployment), (loop or asyncio.get_running_loop()).create_future())
        self.waiters[waiter.req.id] = waiter
        self.scheduler.on_request(waiter.req, time.time())
        if waiter.future.done():
            self.waiters.pop(waiter.req.id, None)
        return waiter

    def abandon(self, waiter: Waiter) -> None:
        """The client went away. Before a grant it leaves the queue; after one, the grant is given back."""
        self.waiters.pop(waiter.req.id, None)
        if waiter.future.done() and not waiter.future.cancelled() and waiter.future.exception() is None:
            self.finished(waiter.req.deployment, None)
            return
        waiter.future.cancel()
        self.scheduler.on_cancel(waiter.req.id, time.time())

    def pick(self, deployment: str) -> Endpoint | None:
        """The healthy endpoint with the fewest requests in flight (ties in turn); counted until `finished`."""
        endpoints = self.catalog.endpoints.get(deployment, ())
        if len(endpoints) == 1:
            endpoint = endpoints[0]
        elif not endpoints:
            return None
        else:
            turn = next(self._turn)
            endpoint = endpoints[min(range(len(endpoints)), key=lambda i: (
                self.endpoint_load.get(endpoints[i].address, 0), (i - turn) % len(endpoints)))]
        self.endpoint_load[endpoint.address] = self.endpoint_load.get(endpoint.address, 0) + 1
        return endpoint

    def finished(self, deployment: str, endpoint: Endpoint | None) -> None:
        if endpoint is not None:
            left = self.endpoint_load.get(endpoint.address, 1) - 1
            if left > 0:
                self.endpoint_load[endpoint.address] = left
            else:
                self.endpoint_load.pop(endpoint.address, None)
        self.scheduler.on_serve_done(deployment, time.time())

    def unloaded(self, name: str, reason: str) -> None:
        """A user scaled `name` to zero or removed it: its waiting requests end with the reason."""
        self.scheduler.on_unload([name], reason, time.time())

    def queue_view(self) -> list[dict]:
        now = time.time()
        rows = [dict(deployment=r.deployment, position=i, state="queued", waited=round(now - r.at, 3))
                for i, r in enumerate(self.scheduler.queue, start=1)]
        rows += [dict(deployment=name, position=0, state="starting", waited=round(now - r.at, 3))
                 for name, reqs in self.scheduler.swaps.items() for r in reqs]
        return rows

    # Effects -------------------------------------------------------------------------------

    def served(self, name: str) -> Served | None:
        return self._served.get(name)

    def ready(self, name: str) -> bool:
        facts = self.catalog.deployments.get(name)
        return facts is not None and facts.replicas > 0 and bool(self.catalog.endpoints.get(name))

    def loaded(self) -> set[str]:
        return {name for name, facts in self.catalog.deployments.items() if facts.replicas > 0}

    def fits(self, target: str, evicting: frozenset[str], loading: frozenset[str]) -> bool:
        """Whether `target` fits once `evicting` are gone and every other running or loading deployment has the
        replicas it wants. The pool view may be a tick old, so the catalog says who wants replicas: a replica
        placed since holds room the view does not show, and one shown for a deployment now at zero is leaving."""
        facts = self.catalog.deployments.get(target)
        if facts is None:
            return True
        request = request_of(facts)
        if not self.pool_view.could_ever_fit(request):
            return True  # no eviction helps; its replica waits in placement, which says why
        reserved = {}
        for name in ((self.loaded() - self.scheduler.unloading) | loading) - evicting - {target}:
            other = self.catalog.deployments.get(name)
            if other is None:
                continue
            wanted = max(other.replicas, wanted_when_loaded(other)) if name in loading else other.replicas
            missing = wanted - self._placed(other)
            if missing > 0:
                reserved[name] = (request_of(other), missing)
        freed = evicting | {name for name, other in self.catalog.deployments.items() if other.replicas == 0}
        missing = wanted_when_loaded(facts) - self._placed(facts)
        return self.pool_view.fits(request, max(missing, 0), freed, reserved)

    def _placed(self, facts: DeploymentFacts) -> int:
        return self.pool_view.placed(facts.name) if facts.replicas else 0

    def start_swap(self, target: str, evict: list[str]) -> None:
        log.info("swap: loading %s%s", target, f", evicting {', '.join(evict)}" if evict else "")
        self._spawn(self._swap(target, evict))

    def evict(self, names: list[str], target: str) -> None:
        log.info("swap: %s still has no room, evicting %s", target, ", ".join(names))
        for name in names:
            self._spawn(self._evict(name, target))

    def grant_serve(self, req: Req, deployment: str) -> bool:
        waiter = self.waiters.pop(req.id, None)
        if waiter is None or waiter.future.done():
            return False
        waiter.future.set_result(deployment)
        return True

    def grant_error(self, req: Req, status: int, reason: str) -> None:
        waiter = self.waiters.pop(req.id, None)
        if waiter is not None and not waiter.future.done():
            waiter.future.set_exception(RouterError(status, reason))

    def position(self, req: Req, position: int) -> None:
        waiter = self.waiters.get(req.id)
        if waiter is not None:
            waiter.positions.put_nowait(position)

    def unload(self, names: list[str], reason: str) -> None:
        for name in names:
            ROUTER_EVICTIONS.labels(name, reason).inc()
            self._spawn(self._scale(name, 0, reason))

    # autoscaling -----------------------------------------------------------------------------

    def load(self, name: str) -> int:
        """Requests in flight at `name` plus those waiting for it (queued or on its cold start)."""
        return (self.scheduler.in_flight.get(name, 0) + sum(r.deployment == name for r in self.scheduler.queue)
                + len(self.scheduler.swaps.get(name, ())))

    def report_load(self, router: str, loads: dict[str, float], now: float) -> None:
        self.reports[router] = (now, loads)

    def _autoscale(self, now: float) -> None:
        """Sample every deployment's load, here and at fresh standalone routers, and move its replica count where
        the decider says."""
        self.reports = {router: (at, loads) for router, (at, loads) in self.reports.items()
                        if now - at <= LOAD_REPORT_FRESH}
        for name, facts in self.catalog.deployments.items():
            bounds = facts.spec.autoscale_bounds
            samples = self.load_samples.setdefault(name, [])
            elsewhere = sum(loads.get(name, 0.0) for _, loads in self.reports.values())
            samples.append(Sample(now, self.load(name) + elsewhere))
            trim(samples, bounds.scale_down_delay, now)
            if name in self._scaling or name in self.scheduler.swaps:
                continue
            decision = decide(samples, bounds, facts.replicas, now)
            if decision is not None and decision.replicas != facts.replicas:
                self.autoscaled[name] = decision
                self._scaling.add(name)
                self._spawn(self._autoscale_to(name, decision))
        for gone in self.load_samples.keys() - self.catalog.deployments.keys():
            del self.load_samples[gone]
            self.autoscaled.pop(gone, None)

    async def _autoscale_to(self, name: str, decision: Decision) -> None:
        try:
            await self._scale(name, decision.replicas, decision.reason)
        except Exception as error:
            log.warning("autoscale %s: %s", name, error)
        finally:
            self._scaling.discard(name)

    # slow work -------------------------------------------------------------------------------

    async def _swap(self, target: str, evict: list[str]) -> None:
        started = time.monotonic()
        error = None
        try:
            for name in evict:
                await self._evict(name, target)
            facts = self.catalog.deployments.get(target)
            if facts is None:
                raise RouterError(404, f"{target} is no longer deployed")
            if facts.replicas < wanted_when_loaded(facts):
                await self._scale(target, wanted_when_loaded(facts), "a request arrived")
            async with asyncio.timeout(self.swap_timeout):
                await self._until_ready(target, time.time())
            ROUTER_COLD_START.labels(target).observe(time.monotonic() - started)
        except TimeoutError:
            error = f"no healthy replica within {self.swap_timeout:.0f}s"
        except Exception as failure:  # reported to every waiter, never lost
            error = str(failure) or type(failure).__name__
        if error:
            log.warning("swap: %s failed: %s", target, error)
        self.scheduler.on_swap_done(target, error, time.time())

    async def _until_ready(self, target: str, since: float) -> None:
        while not self.ready(target):
            if target not in self.catalog.deployments:
                raise RouterError(404, f"{target} was undeployed")
            failed_at, why = self.catalog.start_failures.get(target, (0.0, ""))
            if failed_at >= since:
                raise RouterError(503, f"a replica failed to start: {why}")
            self._changed.clear()
            await self._changed.wait()

    async def _evict(self, name: str, target: str) -> None:
        ROUTER_EVICTIONS.labels(name, "swap").inc()
        await self._scale(name, 0, f"evicted to load {target}")

    async def _scale(self, name: str, replicas: int, reason: str) -> None:
        try:
            await self.backend.scale(name, replicas, reason)
        except Exception as error:
            if replicas:
                raise  # a swap reports it to its waiters
            log.warning("unloading %s: %s", name, error)  # gone already, or the controller is away: nothing waits
            return
        facts = self.catalog.deployments.get(name)
        if facts is not None:  # seen at once, before the next catalog arrives
            deployments = dict(self.catalog.deployments)
            deployments[name] = DeploymentFacts(facts.id, facts.name, facts.spec, facts.state, facts.since, replicas,
                                                facts.key_hashes)
            endpoints = self.catalog.endpoints if replicas else {**self.catalog.endpoints, name: ()}
            self.catalog = Catalog(deployments, endpoints, self.catalog.start_failures)

    def _spawn(self, coroutine) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
