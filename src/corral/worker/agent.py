"""The worker daemon: registers, heartbeats, runs what the controller orders, and ships logs.

Everything goes over the worker's outbound HTTP. Two loops share one client: a poller that
keeps a long-poll heartbeat outstanding, so orders arrive as soon as the controller has them
(after new orders other than builds it waits for their reports' heartbeat, whose reply carries any newer), and a
reporter that sends state changes as soon as they happen (waiting only for those that follow within turns of the
loop: Agent._linger), batching whatever accumulated while its previous request was in flight. A report leaves the
outbox only once a reply confirms it arrived, so an unreachable controller delays reports but loses none.
The end of a preempted attempt is an acknowledgement with its epoch: it goes, in its turn
among the reports, to its own endpoint, which refuses (409) one from a stale epoch.
The runner remembers each attempt's orders, to act on each once, until the controller has the attempt's end and
no reply read before it had it can still come: then the poller has it forget them (Runner.forget).
A relay order (a client attached to a task here) is the one exception to outbound HTTP: the worker dials a
WebSocket back to the controller named in the order (corral.worker.channels), still outbound.
Given several controllers (one database), it talks to one; when that one stops answering (no connection, a
timeout, a 5xx) it moves to the next, keeping its worker id, its tasks and its outbox: the database is shared.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ipaddress
import logging
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from logging.handlers import QueueHandler, QueueListener
from pathlib import Path
from queue import SimpleQueue
from typing import Any
from urllib.parse import urlsplit

import httpx

from corral.core.backoff import failover_delay
from corral.core.failover import Rotation
from corral.core.log_limits import DEFAULT_LOG_LIMIT
from corral.core.protocol import (
    API,
    MAX_ENVIRONMENTS,
    MAX_PYTHONS,
    MAX_REPORTS,
    BuildOrder,
    CachedEnvironment,
    HeartbeatReply,
    HeartbeatRequest,
    PreemptedAck,
    RegisterReply,
    RegisterRequest,
    RelayOrder,
    TaskReport,
)
from corral.core.states import TASK_TERMINAL, TaskState
from corral.filesystem import filesystem_id
from corral.waiting import woken
from corral.worker.accounts import read_no_follow
from corral.worker.bundles import BundleCache, BundleError
from corral.worker.channels import dial, relay_url
from corral.worker.containment import reap_leftovers
from corral.worker.environments import DEFAULT_BUILD_TIMEOUT, EnvironmentCache, discover_pythons
from corral.worker.logs import LogShipper
from corral.worker.resources import GpuMeter, detect_capacity, mps_pipe_directory, sharing_note
from corral.worker.retention import prune_attempts_loop
from corral.worker.runner import Runner
from corral.worker.terminal import Socket

log = logging.getLogger("corral.worker")

REQUEST_TIMEOUT = 30.0  # on top of a long-poll's own wait
CONNECT_TIMEOUT = 5.0  # a controller that takes longer to accept a connection is away: the next one is tried
CHECKPOINT_TRIES = 5  # uploads of a checkpoint tried while the controller is unreachable
PACE_FIRST = 0.05  # first pause of the poller when a reply repeats only orders it already acts on
# How long the poller waits, after a reply with new orders, for the reports they make to be delivered: until they
# arrive the controller answers a poll at once with the same orders again, a round trip for nothing.
SETTLE = PACE_FIRST
# States an attempt passes through on its own, its next report usually milliseconds behind (a task with nothing
# to build is BUILDING, PREPARED and RUNNING within one spawn): a report of one waits this long for the next, so
# that one heartbeat, one commit on the controller, carries them all rather than one each.
PASSING = frozenset({TaskState.BUILDING, TaskState.PREPARED})
LINGER = 0.02
# The longest a report waits while a wave of orders is being started (Agent._linger).
STARTS_LINGER = 0.25


def route_address(controller_url: str) -> str:
    """An address of this host on the route to the controller: what gang peers can reach.

    127.0.0.1 when the controller is on loopback (a one-machine cluster).
    """
    parts = urlsplit(controller_url)
    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(parts.hostname or "127.0.0.1", parts.port or 80,
                                                       type=socket.SOCK_DGRAM)[0]
        if ipaddress.ip_address(sockaddr[0]).is_loopback:
            return "127.0.0.1"
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(sockaddr)  # UDP: picks the route, sends nothing
            return probe.getsockname()[0]
    except OSError:
        return socket.gethostname()


def installation_bin() -> str:
    """The directory holding the `corral` command and the Python of this installation (a virtualenv's bin)."""
    return str(Path(sys.executable).parent)


def worker_env(controller_urls: str, path: str | None = None) -> dict[str, str]:
    """How code in a task reaches the controllers (all of them, comma-separated, with its job's CORRAL_TOKEN), runs
    Python functions and finds `corral`: this installation's bin ends the task's PATH (`corral up` puts it first,
    for `import corral` too)."""
    entries = (os.defpath if path is None else path).split(os.pathsep)
    if installation_bin() not in entries:
        entries.append(installation_bin())
    return {"CORRAL_URL": controller_urls.rstrip("/"), "CORRAL_PYTHON": sys.executable,
            "PATH": os.pathsep.join(e for e in entries if e)}


@dataclass
class WorkerOptions:
    controller_url: str  # the first controller
    token: str
    name: str = field(default_factory=socket.gethostname)
    address: str | None = None  # default: route_address(controller_url)
    work_dir: Path = Path(".corral-worker")
    cpus: float | None = None
    memory: int | None = None
    gpus: int | None = None
    gpu_memory: int = 0  # bytes each virtual GPU reports (0: unknown)
    labels: dict[str, str] = field(default_factory=dict)
    heartbeat_interval: float = 2.0
    pool: str = "default"
    resources: dict[str, float] = field(default_factory=dict)  # custom slots offered, e.g. {"tpu": 4}
    shared_fs: list[str] = field(default_factory=list)  # absolute directories shared with submitters elsewhere
    log_limit: int = DEFAULT_LOG_LIMIT  # bytes of each stream kept per attempt
    attempt_retention: float | None = 86400.0  # seconds ended attempts' directories are kept (None: for ever)
    containment: str = "auto"  # how tasks' processes are contained: "auto", "cgroup" or "processes"
    env_build_timeout: float = DEFAULT_BUILD_TIMEOUT  # seconds a job's Python environment may take to build
    env_cache_size: int | None = None  # bytes the cached environments may use (None: no cap)
    other_controllers: list[str] = field(default_factory=list)  # more controllers of the same database, in order

    @property
    def controllers(self) -> list[str]:
        return [self.controller_url, *self.other_controllers]


class WorkerError(Exception):
    """The controller refuses this worker (bad token, bad request): retrying would not help."""


class _Unreachable(Exception):
    """No answer, or a 5xx: the controller may come back; keep the tasks and retry."""


class _Lost(Exception):
    """409: the controller declared this worker lost and has given its tasks to others."""


def _json(response: httpx.Response) -> dict:
    """A reply's JSON object, or an empty one when it has none."""
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


class _Refused(Exception):
    """409 naming reports the controller will never accept (moves only it makes): they are dropped."""

    def __init__(self, refused: list[dict]) -> None:
        super().__init__(f"reports refused: {refused}")
        self.refused = {(r["task_id"], r["attempt"], r["state"]) for r in refused}


class _Backoff:
    """Jittered exponential retry delays, with one warning per outage rather than one per try."""

    def __init__(self, what: str, cap: float, first: float = 0.2) -> None:
        self.what, self.cap, self.first = what, cap, first
        self.failures = 0

    async def wait(self, error: Exception) -> None:
        if not self.failures:
            log.warning("%s: controller unreachable (%s); retrying", self.what, error)
        await asyncio.sleep(failover_delay(self.failures, self.first, self.cap))
        self.failures += 1

    def reset(self) -> None:
        if self.failures:
            log.info("%s: controller answers again", self.what)
        self.failures = 0


class Agent:
    def __init__(self, options: WorkerOptions, http: httpx.AsyncClient) -> None:
        self.options = options
        self.http = http
        self.controllers = Rotation(options.controllers)
        work_dir = options.work_dir.resolve()
        self.capacity, self.gpus = detect_capacity(options.cpus, options.memory, options.gpus, options.resources,
                                                   gpu_memory=options.gpu_memory)
        mps = mps_pipe_directory(os.environ)
        if self.gpus:
            log.info(sharing_note(mps))
        self.gpu_meter = GpuMeter([gpu.index for gpu in self.gpus if gpu.uuid])  # NVML's devices, not virtual ones
        self.shipper = LogShipper(self._send_log)
        bundles = BundleCache(work_dir / "bundles", self._download)
        self.environments = EnvironmentCache(work_dir / "environments", build_timeout=options.env_build_timeout,
                                             max_size=options.env_cache_size)
        self._environments_sent = -1  # the generation of the cache the controller last confirmed
        self._pythons_unsent: list[str] | None = None  # found since registering, not yet confirmed
        try:
            filesystem = filesystem_id()
        except ValueError as error:
            raise WorkerError(str(error)) from None
        try:
            self.runner = Runner(work_dir, report=self._queue, fetch_bundle=bundles.fetch,
                                 flush_logs=self.shipper.flush, watch_logs=self.shipper.watch,
                                 gpus=self.capacity.gpu, gpu_memory={g.index: g.memory for g in self.gpus if g.memory},
                                 mps=mps is not None, fetch_checkpoint=self._fetch_checkpoint,
                                 save_checkpoint=self._save_checkpoint,
                                 task_env=worker_env(",".join(options.controllers), os.environ.get("PATH")),
                                 log_limit=options.log_limit, containment=options.containment,
                                 filesystem=filesystem, shared_fs=options.shared_fs, environments=self.environments,
                                 dial=self._dial, name=options.name)
        except OSError as error:  # only where cgroups are demanded and there are none
            raise WorkerError(f"no cgroup for tasks: {error}") from None
        self.worker_id = ""
        self.interval = options.heartbeat_interval
        self._registered = asyncio.Event()  # clear while re-registering: the loops hold still
        self._rejoin_lock = asyncio.Lock()
        self._outbox: list[TaskReport] = []
        self._outbox_generation = 0  # bumped when the outbox is dropped, so a late reply removes nothing
        self._outbox_filled = asyncio.Event()
        self._delivered = asyncio.Event()  # set when a heartbeat carrying reports is answered
        self._ends_delivered: list[tuple[int, int]] = []  # attempts whose end the controller has, for the poller
        self.linger = LINGER
        self.starts_linger = STARTS_LINGER
        self.settle = SETTLE

    async def serve(self) -> None:
        """Kill what a previous worker on this work directory left running, register, then heartbeat and ship
        logs until cancelled; raises WorkerError when refused. The environments it kept from before are found
        meanwhile, and registered; the Pythons other than its own, which take seconds to find, follow in a
        heartbeat."""
        await asyncio.gather(asyncio.to_thread(reap_leftovers, self.runner.work_dir, self.runner.cgroups),
                             asyncio.to_thread(self.environments.scan))
        await self._register()
        loops = [asyncio.create_task(loop())
                 for loop in (self._poll, self._deliver, self.shipper.run, self._find_pythons)]
        if self.options.attempt_retention is not None:
            loops.append(asyncio.create_task(prune_attempts_loop(self.runner, self.options.attempt_retention)))
        try:
            done, _ = await asyncio.wait(loops, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()
        finally:
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)

    # registration ------------------------------------------------------------------------

    async def _register(self) -> None:
        options = self.options
        generation = self.environments.generation
        request = RegisterRequest(
            name=options.name, address=options.address or route_address(options.controller_url),
            capacity=self.capacity, gpu_names=[gpu.model for gpu in self.gpus], labels=options.labels,
            pool=options.pool, gpus=self.gpus, running=self.runner.running(),
            filesystem=self.runner.filesystem, shared_fs=self.runner.shared_fs,
            pythons=self._pythons(), run_as_owners=self.runner.run_as_owners, account=self.runner.user,
            **self._environments())
        backoff = _Backoff("register", cap=2.0)
        while True:
            try:
                response = await self._post(f"{API}/workers", json=request.model_dump(mode="json"))
                break
            except _Unreachable as error:
                await backoff.wait(error)
            except _Lost as error:
                raise WorkerError(f"registration refused: {error}") from None
        reply = RegisterReply.model_validate(response.json())
        self._environments_sent = generation
        self.worker_id, self.interval = reply.worker_id, reply.heartbeat_interval
        self._registered.set()
        log.info("registered worker_id=%s name=%s pool=%s address=%s cpu=%s memory=%s gpus=%s", reply.worker_id,
                 request.name, request.pool, request.address, self.capacity.cpu, self.capacity.memory,
                 [f"{gpu.index}:{gpu.model}:{gpu.uuid}" for gpu in self.gpus])

    async def _rejoin(self, stale_id: str) -> None:
        """The controller gave up on us: kill our tasks, forget their reports, and register anew."""
        async with self._rejoin_lock:
            if self.worker_id != stale_id:
                return  # the other loop already did it
            log.warning("controller declared worker_id=%s lost: killing its tasks and registering again", stale_id)
            self._registered.clear()
            await self.runner.shutdown()
            self.runner.forget_all()  # the orders of the lost identity are dropped (_dispatch): none can repeat
            self._outbox.clear()
            self._outbox_generation += 1
            await self._register()

    # the two heartbeat loops -------------------------------------------------------------

    async def _poll(self) -> None:
        """Keep one long-poll outstanding, so orders arrive as soon as the controller has them; after new ones other
        than builds, only once their reports are delivered (or `settle` passes): that heartbeat's reply brings any
        newer ones, and the controller repeats a start, a stop or a preemption until its report is in. A build it
        gives no heartbeat that holds it, so after builds alone the next poll goes at once.

        As a poll begins the runner forgets the attempts whose end was delivered before it: the poll outstanding
        then may have been read before the controller had their ends (and carry an order for them again), but it
        has been answered and its orders taken, and every reply still to come is read after."""
        backoff = _Backoff("heartbeat", cap=1.0)
        pace = PACE_FIRST
        while True:
            await self._registered.wait()
            worker_id = self.worker_id
            self.runner.forget(self._ends_delivered)
            self._ends_delivered = []
            try:
                reply = await self._heartbeat(worker_id, [], self.interval)
            except _Unreachable as error:
                await backoff.wait(error)
                continue
            except _Lost:
                await self._rejoin(worker_id)
                continue
            backoff.reset()
            if self._dispatch(worker_id, reply):
                pace = PACE_FIRST
                if all(isinstance(order, BuildOrder) for order in reply.orders):
                    # Builds only: the controller gives none of them again to a heartbeat that holds them (holding),
                    # so the next poll waits for newer orders: it is outstanding when they come (a wave's next).
                    continue
                # Poll again once their reports are delivered (that heartbeat's reply brings any newer orders).
                self._delivered.clear()
                await woken(self._delivered, self.settle)
            elif not reply.orders:
                pace = PACE_FIRST
            else:
                # Orders repeat until our reports show them done (a stop during its grace period), and the
                # controller answers at once while any is pending: slow down instead of spinning.
                await asyncio.sleep(pace)
                pace = min(pace * 2, self.interval)

    async def _deliver(self) -> None:
        """Send reports as soon as there are some, in order; they leave the outbox once a reply confirms them."""
        backoff = _Backoff("report", cap=1.0)
        while True:
            await self._outbox_filled.wait()
            self._outbox_filled.clear()
            await self._registered.wait()
            if not self._outbox:
                continue
            await self._linger()
            # At most what one heartbeat may carry; the rest follows in the next.
            worker_id, generation, batch = self.worker_id, self._outbox_generation, self._outbox[:MAX_REPORTS]
            ack = next((i for i, r in enumerate(batch) if r.state is TaskState.PREEMPTED), None)
            if ack is not None:
                batch = batch[:ack] or batch[:1]  # the reports before it first, then it alone
            try:
                if batch[0].state is TaskState.PREEMPTED:
                    ends = batch if await self._acknowledge(worker_id, batch[0]) else []
                    reply = None
                else:
                    reply = await self._heartbeat(worker_id, batch, 0.0)
                    ends = [report for report in batch if report.state in TASK_TERMINAL]
            except _Unreachable as error:
                self._outbox_filled.set()
                await backoff.wait(error)
                continue
            except _Lost:
                await self._rejoin(worker_id)
                continue
            except _Refused as refused:
                log.error("%s; dropped", refused)
                if generation == self._outbox_generation:
                    self._outbox[:len(batch)] = [r for r in batch
                                                 if (r.task_id, r.attempt, r.state) not in refused.refused]
                self._outbox_filled.set()
                continue
            backoff.reset()
            self._delivered.set()
            if generation == self._outbox_generation:
                del self._outbox[:len(batch)]
                self._ends_delivered += [(report.task_id, report.attempt) for report in ends]
            if self._outbox:
                self._outbox_filled.set()
            if reply is not None:
                self._dispatch(worker_id, reply)

    async def _linger(self) -> None:
        """Wait for the reports that follow those waiting, where they follow within turns of the loop: up to `linger`
        while every report waiting is of a PASSING state or an attempt's end is on its way (its process has exited,
        its report not yet made), and for as long as `starts_linger` while attempts are being started (a wave of
        orders: its reports go together, the starts' and the ends' of tasks that exit meanwhile). Two turns of the
        loop first, so that the exits it has not yet read are reaped.

        A wave's starts run in few long turns of the loop: a heartbeat sent in the middle of them left only after,
        and the wave's ends then waited for its answer."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        deadline = began + self.linger
        for _ in range(2):
            await asyncio.sleep(0)
        while True:
            if self.runner.starting():
                deadline = max(deadline, min(loop.time() + self.linger, began + self.starts_linger))
            elif not (all(r.state in PASSING for r in self._outbox) or self.runner.ending()):
                return
            left = deadline - loop.time()
            if left <= 0:
                return
            self._outbox_filled.clear()
            await woken(self._outbox_filled, left)

    def _queue(self, report: TaskReport) -> None:
        # At DEBUG: the runner's own lines say each state a task reaches that a reader looks for (running, with its
        # pid; ended, with its code and reason). At INFO these were four of a task's seven lines, each formatted on
        # the loop and written by the listener's thread.
        log.debug("task=%s attempt=%s report %s", report.task_id, report.attempt, report.state)
        self._outbox.append(report)
        self._outbox_filled.set()

    def _dispatch(self, worker_id: str, reply: HeartbeatReply) -> bool:
        """Hand the reply's orders to the runner; True if any was new."""
        self.interval = reply.heartbeat_interval
        if worker_id != self.worker_id or not self._registered.is_set():
            return False  # orders for an identity we no longer have
        new = False
        for order in reply.orders:
            if self.runner.submit(order):
                log.info("task=%s attempt=%s order %s", order.task_id, order.attempt, order.action)
                new = True
        return new

    # HTTP --------------------------------------------------------------------------------

    async def _heartbeat(self, worker_id: str, reports: list[TaskReport], wait: float) -> HeartbeatReply:
        generation, pythons = self.environments.generation, self._pythons_unsent
        changed = self._environments() if generation != self._environments_sent else {}
        gpus = await asyncio.to_thread(self.gpu_meter.read) if self.gpu_meter.indices else None
        # What it holds goes with every heartbeat: the orders of a wave's tasks not yet reported came again in
        # every reply until their reports were in, each built, sent and read again.
        body = HeartbeatRequest(reports=reports, wait=wait, pythons=pythons, gpus=gpus or None,
                                holding=self.runner.holding()[:MAX_REPORTS], **changed).model_dump(mode="json")
        response = await self._post(f"{API}/workers/{worker_id}/heartbeat", json=body,
                                    timeout=httpx.Timeout(wait + REQUEST_TIMEOUT, connect=CONNECT_TIMEOUT))
        if changed:
            self._environments_sent = max(self._environments_sent, generation)
        if pythons is not None and self._pythons_unsent is pythons:
            self._pythons_unsent = None
        return HeartbeatReply.model_validate(response.json())

    async def _find_pythons(self) -> None:
        """Find the interpreters uv sees here, at a low priority, for the next heartbeat to carry."""
        self.environments.interpreters = await asyncio.to_thread(discover_pythons, nice=True)
        self._pythons_unsent = self._pythons()

    def _pythons(self) -> list[str]:
        return sorted({i.version for i in self.environments.interpreters})[:MAX_PYTHONS]

    def _environments(self) -> dict[str, list[CachedEnvironment]]:
        """The cached environments, as registration and heartbeats carry them (the newest used first, capped)."""
        cached = sorted(self.environments.listing(), key=lambda e: -e.last_used)
        return {"environments": cached[:MAX_ENVIRONMENTS]}

    async def _acknowledge(self, worker_id: str, report: TaskReport) -> bool:
        """Confirm a preempted attempt is gone; a refusal (another epoch, a task moved on) is logged and dropped.
        Whether the controller took it: after a refusal it may order the attempt's preemption again."""
        body = PreemptedAck(attempt=report.attempt, epoch=report.epoch or 0, exit_code=report.exit_code,
                            reason=report.reason)
        response = await self._request(f"{API}/workers/{worker_id}/tasks/{report.task_id}/preempted",
                                        json=body.model_dump(mode="json"))
        if response.status_code >= 400:
            log.warning("task=%s attempt=%s acknowledgement of epoch %s refused: HTTP %s %s", report.task_id,
                        report.attempt, report.epoch, response.status_code, response.text)
            return False
        return True

    async def _save_checkpoint(self, task_id: int, attempt: int, epoch: int, path: Path) -> str | None:
        """Upload a preempted attempt's checkpoint; returns why it was not stored, or None."""
        try:
            data = await asyncio.to_thread(read_no_follow, path)
        except OSError as error:
            return f"checkpoint not readable: {error.strerror}"
        backoff = _Backoff("checkpoint", cap=2.0)
        for _ in range(CHECKPOINT_TRIES):
            try:
                response = await self._request(
                    f"{API}/workers/{self.worker_id}/tasks/{task_id}/checkpoint",
                    params={"attempt": attempt, "epoch": epoch}, content=data,
                    headers={"Content-Type": "application/octet-stream"})
            except _Unreachable as error:
                await backoff.wait(error)
                continue
            if response.status_code < 400:
                log.info("task=%s attempt=%s checkpoint of %d bytes saved (epoch %s)", task_id, attempt, len(data),
                         epoch)
                return None
            why = f"checkpoint refused: HTTP {response.status_code} {response.text}"
            log.warning("task=%s attempt=%s %s", task_id, attempt, why)
            return why
        return "checkpoint not saved: controller unreachable"

    async def _fetch_checkpoint(self, task_id: int, destination: Path) -> None:
        response = await self._request(f"{API}/workers/{self.worker_id}/tasks/{task_id}/checkpoint", method="GET")
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code} {response.text}")
        await asyncio.to_thread(destination.write_bytes, response.content)

    async def _request(self, path: str, method: str = "POST", **kwargs: Any) -> httpx.Response:
        """A request whose refusals (4xx) the caller reads itself; no answer or a 5xx is _Unreachable, and the
        next request goes to the next controller."""
        url = self.controllers.current
        try:
            response = await self.http.request(method, url + path, **kwargs)
        except httpx.TransportError as error:
            self._fail_over(url, error)
            raise _Unreachable(f"{url}: {type(error).__name__}: {error}") from None
        if response.status_code >= 500:
            self._fail_over(url, f"HTTP {response.status_code}")
            raise _Unreachable(f"{url}: HTTP {response.status_code}")
        return response

    def _fail_over(self, url: str, why: object) -> None:
        """Move to the next controller, once per failure of the current one whichever loop saw it first."""
        if len(self.controllers.urls) > 1 and url == self.controllers.current:
            log.warning("controller %s failed (%s): moving to %s", url, why, self.controllers.failed(url))

    async def _post(self, path: str, **kwargs: Any) -> httpx.Response:
        response = await self._request(path, **kwargs)
        if response.status_code == 409:
            detail = _json(response).get("detail")
            if isinstance(detail, dict) and isinstance(detail.get("refused"), list):
                raise _Refused(detail["refused"])
            raise _Lost(response.text)
        if response.status_code >= 400:
            raise WorkerError(f"the controller refused POST {path}: HTTP {response.status_code} {response.text}")
        return response

    async def _send_log(self, task_id: int, attempt: int, stream: str, offset: int, data: bytes) -> None:
        path = f"{API}/workers/{self.worker_id}/logs/{task_id}/{attempt}/{stream}"
        try:
            await self._post(path, params={"offset": offset}, content=data,
                             headers={"Content-Type": "application/octet-stream"})
        except WorkerError as error:  # retrying a refused chunk would block the rest of the stream forever
            log.warning("task=%s attempt=%s %s chunk at offset %s dropped: %s", task_id, attempt, stream, offset,
                        error)

    def _dial(self, order: RelayOrder) -> AbstractAsyncContextManager[Socket]:
        """The WebSocket back to the relay of a channel a client opened into a task here."""
        url = relay_url(order.url or self.controllers.current, order.session, self.worker_id)
        return dial(url, self.options.token)

    async def _download(self, digest: str) -> AsyncIterator[bytes]:
        url = self.controllers.current
        try:
            async with self.http.stream("GET", f"{url}{API}/bundles/{digest}") as response:
                if response.status_code >= 500:
                    self._fail_over(url, f"HTTP {response.status_code}")
                if response.status_code != 200:
                    await response.aread()
                    raise BundleError(f"bundle {digest[:12]}: HTTP {response.status_code} {response.text}")
                async for chunk in response.aiter_bytes():
                    yield chunk
        except httpx.TransportError as error:
            self._fail_over(url, error)
            raise BundleError(f"bundle {digest[:12]}: controller {url} unreachable ({error})") from None


async def run(options: WorkerOptions, stop: asyncio.Event) -> None:
    """Run the worker until `stop` is set, then stop every task; raises WorkerError when the controller refuses it."""
    headers = {"Authorization": f"Bearer {options.token}"}
    timeout = httpx.Timeout(REQUEST_TIMEOUT, connect=CONNECT_TIMEOUT)
    async with httpx.AsyncClient(headers=headers, timeout=timeout) as http:  # each request names its controller
        agent = Agent(options, http)
        gc.freeze()  # what start-up made (modules, the runner, the client) lives on: collections skip it
        serving = asyncio.create_task(agent.serve())
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait([serving, stopping], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (serving, stopping):
                task.cancel()
            await asyncio.gather(serving, stopping, return_exceptions=True)
            log.info("shutting down: stopping %d task(s)", len(agent.runner.running()))
            await agent.runner.shutdown()
        error = None if serving.cancelled() else serving.exception()
        if error is not None:
            raise error


def watch_children_by_pidfd() -> None:
    """Have asyncio wait for the worker's children through a pidfd on the event loop, as Python 3.12 does by
    default, rather than as 3.11 does, in a thread started for each: one thread per task started, which a
    worker running hundreds of short tasks a second spends a tenth of its time on. Kept where pidfds are
    missing (a kernel before 5.3)."""
    if sys.version_info >= (3, 12):
        return
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return
    watcher = asyncio.PidfdChildWatcher()
    watcher.attach_loop(asyncio.get_running_loop())
    asyncio.set_child_watcher(watcher)


class _Handover(QueueHandler):
    """Queues a record with its message made (its arguments may change after the call) and nothing else done: the
    time, the JSON and the exception's text are formatted by the handlers, in the listener's thread. The record
    itself is queued, not a copy (a third of a line's cost on the loop): it is the root logger's only handler, the
    last a record meets, so once it is queued nothing but the listener reads it."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        record.msg, record.args = record.getMessage(), None
        return record


@contextlib.contextmanager
def logs_written_in_background() -> Iterator[None]:
    """Within the block the root logger's handlers run in a thread of their own, in the order the lines came: a line
    is a write to a file, which on a busy disk waits for its journal (24 us a line on average, up to 8 ms, measured
    beside a running controller), and the worker logs three lines per task (its order, its start, its end) on its
    event loop. The block's end writes what is still queued."""
    root = logging.getLogger()
    handlers = root.handlers[:]
    queue: SimpleQueue = SimpleQueue()
    listener = QueueListener(queue, *handlers, respect_handler_level=True)
    root.handlers = [_Handover(queue)]
    listener.start()
    try:
        yield
    finally:
        listener.stop()
        root.handlers = handlers


def run_worker(options: WorkerOptions) -> None:
    """The `corral worker` process: runs until SIGTERM or SIGINT, then stops its tasks and exits 0."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per heartbeat otherwise
    # Its lines name no caller, thread or process, so no record looks them up (the switches the logging HOWTO
    # gives for this): the worker logs three lines a task on its event loop.
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        watch_children_by_pidfd()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run(options, stop)

    with logs_written_in_background():
        try:
            asyncio.run(main())
        except WorkerError as error:
            log.error("%s", error)
            raise SystemExit(f"corral worker: {error}") from None
