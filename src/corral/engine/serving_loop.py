"""The serving loop beside the job engine: runs the serving handlers, and probes replicas' health.

Health checks are made by the controller over HTTP (the worker's heartbeat stays about
tasks): the prober keeps each replica's latest result in memory, and HealthCheckReplica
reads it from its snapshot like any other fact.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable

import httpx

from corral.core.lifecycle import SchedulingResult
from corral.core.serving import REPLICA_PROBED, REPLICA_STARTING, Catalog, Probe, ReplicaState, ServingSnapshot
from corral.engine.fencing import BUSY_RETRY, FENCED, note_fenced
from corral.engine.serving_coordinator import ServingReport, run_serving_handler, would_act
from corral.engine.serving_handlers import SERVING_HANDLERS, ServiceDiscoverySync, ServingHandler
from corral.engine.target_errors import TargetErrors
from corral.store.deployments import read_snapshot
from corral.store.handler_locks import HandlerBusy
from corral.store.store import Store
from corral.waiting import woken

log = logging.getLogger("corral.serving")

PERIOD = 1.0  # with no event, every serving handler still runs this often
STARTING_PERIOD = 0.1  # ...and this often while a replica starts (a request may be waiting on it)
PROBE_TICK = 0.1
DISCOVERY = next(h for h in SERVING_HANDLERS if isinstance(h, ServiceDiscoverySync))


class ServingEngine:
    def __init__(self, store: Store, *, wake_jobs: Callable[[], None], publish: Callable[[Catalog], None],
                 on_health: Callable[[str, int, bool], None] | None = None) -> None:
        self.store = store
        self.wake_jobs = wake_jobs
        self.publish = publish
        self.on_health = on_health
        self.probes: dict[int, Probe] = {}
        self.start_failures: dict[str, tuple[float, str]] = {}
        self.snapshot: ServingSnapshot | None = None
        self._woken = asyncio.Event()
        self._probing: dict[int, asyncio.Task] = {}
        self.target_errors = TargetErrors()  # streaks of errors about one deployment or replica, across passes
        self.busy = False  # a handler of the last pass was held by another controller: look again soon

    def wake(self) -> None:
        self._woken.set()

    async def changed(self) -> None:
        """A user changed a deployment: publish the router's catalog now (the API answers after), then run a pass."""
        async with self.store.read() as connection:
            snapshot = await read_snapshot(connection, time.time(), self.probes)
        would_act(DISCOVERY, snapshot, self._publish)  # publishes what it finds, in this controller: no lock to wait on
        self.wake()

    def _publish(self, catalog: Catalog) -> None:
        self.publish(dataclasses.replace(catalog, start_failures=dict(self.start_failures)))

    def _note_start_failures(self, handler: ServingHandler, report: ServingReport) -> None:
        """Replicas that ended before they ever served (a replica handler's failure of one still starting): a swap
        waiting on their deployment fails at once."""
        snapshot = report.snapshot
        if handler.entity != "replica" or snapshot is None:
            return
        for outcome in report.outcomes:
            if outcome.result is SchedulingResult.NEED_RETRY and outcome.target.state in REPLICA_STARTING:
                replica = snapshot.replicas.get(outcome.target.id)
                if replica is not None and replica.deployment_id in snapshot.deployments:
                    name = snapshot.deployments[replica.deployment_id].name
                    self.start_failures[name] = (snapshot.now, outcome.note or "its process ended")

    async def run(self) -> None:
        prober = asyncio.create_task(self._probe_loop(), name="serving-prober")
        try:
            while True:
                if await self.run_pass():
                    continue
                await woken(self._woken, self._idle_timeout())
        finally:
            prober.cancel()
            for task in self._probing.values():
                task.cancel()

    async def run_pass(self) -> bool:
        """Every handler in order; one read serves all those with nothing to do, writes only where one acts."""
        self._woken.clear()
        self.busy = False
        changed = False
        snapshot = None
        for handler in SERVING_HANDLERS:
            try:
                if snapshot is None:
                    async with self.store.read() as connection:
                        snapshot = self.snapshot = await read_snapshot(connection, time.time(), self.probes)
                if not would_act(handler, snapshot, self._publish):
                    continue
                report = await run_serving_handler(self.store, handler, time.time(), self.probes, self._publish,
                                                   self.target_errors)
                self._note_start_failures(handler, report)
            except HandlerBusy:
                self.busy = True  # another controller runs it now
                continue
            except FENCED as error:
                note_fenced(handler.name, error, log)
                snapshot = None
                continue
            except Exception:
                log.exception("serving handler %s failed; its transaction was rolled back", handler.name)
                snapshot = None
                continue
            snapshot = None  # it acted: the next handler reads what it wrote
            changed |= report.changed
            if report.jobs_changed:
                self.wake_jobs()
        return changed

    def _idle_timeout(self) -> float:
        if self.busy:
            return BUSY_RETRY
        return STARTING_PERIOD if self._starting() else PERIOD

    def _starting(self) -> bool:
        """Replicas on their way up are looked at often: a cold start waits on them."""
        return self.snapshot is not None and any(r.state in REPLICA_STARTING for r in self.snapshot.replicas.values())

    # health ------------------------------------------------------------------------------

    async def _probe_loop(self) -> None:
        async with httpx.AsyncClient() as http:
            while True:
                self._probe_due(http)
                await asyncio.sleep(PROBE_TICK)

    def _probe_due(self, http: httpx.AsyncClient) -> None:
        snapshot = self.snapshot
        if snapshot is None:
            return
        now = time.time()
        probed = {r.id for r in snapshot.replicas.values() if r.state in REPLICA_PROBED and r.address}
        for replica_id in set(self.probes) - probed - set(self._probing):
            del self.probes[replica_id]
        for replica_id in probed - set(self._probing):
            replica = snapshot.replicas[replica_id]
            health = snapshot.spec_of(replica).health
            last = self.probes.get(replica_id)
            interval = min(health.interval, STARTING_PERIOD) if replica.state is ReplicaState.DEGRADED else \
                health.interval
            if last is None or now - last.at >= interval:
                name = snapshot.deployments[replica.deployment_id].name
                task = asyncio.create_task(self._probe(http, name, replica_id, f"http://{replica.address}{health.path}",
                                                       health.timeout))
                self._probing[replica_id] = task

    async def _probe(self, http: httpx.AsyncClient, deployment: str, replica_id: int, url: str,
                     timeout: float) -> None:
        try:
            response = await http.get(url, timeout=timeout)
            ok, detail = response.is_success, f"{response.status_code} from {url}"
        except httpx.HTTPError as error:
            ok, detail = False, f"{type(error).__name__} {error}".strip() + f" from {url}"
        finally:
            self._probing.pop(replica_id, None)
        last = self.probes.get(replica_id)
        failures = 0 if ok else (last.failures if last else 0) + 1
        self.probes[replica_id] = Probe(time.time(), ok, failures, detail)
        if last is None or last.ok != ok or failures:
            self.wake()
        if self.on_health is not None and (last is None or last.ok != ok):
            self.on_health(deployment, replica_id, ok)
