"""A thousand workers against one controller: heartbeats stay on time while 20,000 tasks go through.

Load generator processes (`--generators K`, spawned; default: the CPUs less one, at least one) share the
simulated workers; each runs one asyncio loop for its share. Each simulated worker holds two keep-alive HTTP/1.1
connections, as the agent's client does for its poll and its reports; a request is written as bytes and its answer
parsed by httptools, so that the generators leave the controller the CPU rather than measure their own queueing.
Every simulated worker speaks the worker protocol's wire format as corral.worker.agent does (the controller
validates every body with the protocol's models; the generator builds and reads plain JSON, so its cost per
heartbeat stays small): it registers, keeps one long-poll heartbeat outstanding, and reports every task it is
ordered to build as BUILDING, PREPARED, RUNNING and SUCCEEDED at once, in report heartbeats of their own
(wait 0), as the agent's reporter sends them. The controller is a real one (tests/e2e/cluster.py) with no
real worker, at the default heartbeat interval and loss timeout. At the end each generator sends its samples
to this process, which merges them.

Measured, on SQLite and then PostgreSQL: tasks per second from the first submission to the last job's end;
each report heartbeat's round trip (p50/p99/max over all generators' samples); each long poll's overrun
past its wait (an answer that comes later than the wait lets the worker's interval slip; one later by half
an interval is counted late); the workers declared LOST (must be none); the controller's CPU seconds, its
share of the run's wall time and its peak RSS (from /proc); the generators' CPU seconds, and which side used
more (when the generators did, the round trips include their own queueing); the generators' CPU a request.
CORRAL_BENCH_FLAMES=1 records flame graphs of the controller and of the first generator while the tasks go through.

    python bench/many_workers.py [--workers 1000] [--tasks 20000] [--only sqlite|postgres] [--generators K]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import multiprocessing
import os
import queue
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event
from pathlib import Path
from urllib.parse import urlsplit

import httptools
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.flames import flame  # noqa: E402
from corral.controller.settings import ControllerSettings as Settings  # noqa: E402
from corral.core.protocol import API, MAX_REPORTS  # noqa: E402
from corral.core.states import TaskState  # noqa: E402
from corral.worker.agent import PACE_FIRST, REQUEST_TIMEOUT  # noqa: E402
from tests.e2e.cluster import Cluster  # noqa: E402
from tests.postgres import POSTGRES_URL, scratch_database  # noqa: E402

WORKER_CPUS = 8
JOB_REPLICAS = 1000  # the tasks are array jobs of this many `true`s, 1 CPU each
LATE_FRACTION = 0.5  # a long poll answered later than its wait by this part of the interval is late
REGISTERING_AT_ONCE = 20  # a cluster's machines come up over time; a thousand registrations in one instant is a storm
REGISTRATION_DEADLINE = 600.0  # seconds the generators may take to register all their workers
RUN_DEADLINE = 1800.0  # seconds the tasks may take before the run is abandoned
STOP_DEADLINE = 60.0  # seconds a generator may take to stop and send its samples
ENDED = TaskState.SUCCEEDED
LIFE = (TaskState.BUILDING, TaskState.PREPARED, TaskState.RUNNING, ENDED)  # what the agent reports of a `true`


@dataclass
class Timings:
    """What the simulated workers saw of the controller's answers, in seconds."""

    report_round_trips: list[float] = field(default_factory=list)
    poll_overruns: list[float] = field(default_factory=list)  # a long poll's answer past its wait, or 0
    failures: list[str] = field(default_factory=list)
    requests: int = 0  # sent by the generator, answered or not
    cpu_seconds: float = 0.0  # the generator process's, from its workers' making to their end

    def merge(self, other: Timings) -> None:
        self.report_round_trips += other.report_round_trips
        self.poll_overruns += other.poll_overruns
        self.failures += other.failures
        self.requests += other.requests
        self.cpu_seconds += other.cpu_seconds


@dataclass(frozen=True)
class Share:
    """One generator process's part: workers sim-FIRST to sim-(FIRST+COUNT-1) of the controller at URL."""

    url: str
    join_token: str
    first: int
    count: int
    registering_at_once: int


@dataclass(frozen=True)
class Stopped:
    """A generator's last word: its samples and, where a worker of its share failed, why."""

    first: int
    timings: Timings
    failure: str | None


class WorkerLost(RuntimeError):
    """The controller declared a simulated worker lost: the run has failed its guarantee and stops."""


class RequestFailed(Exception):
    """A request with no good answer: the connection failed or closed, the time ran out, or the status was an error."""


class Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection to the controller, one request at a time, opened again when it closes.

    httpx spends some 300 us of CPU on a request where the controller's heartbeat lane spends 125: with a thousand
    workers the generators would take more of the machine than the controller. Here a request is one write of
    bytes and its answer is parsed by httptools (the parser uvicorn uses), in a few tens of us.
    """

    def __init__(self, host: str, port: int, head: bytes, timings: Timings) -> None:
        self.host, self.port, self.head, self.timings = host, port, head, timings
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.answer: asyncio.Future[tuple[int, bytes]] | None = None
        self.body: list[bytes] = []

    async def post(self, path: str, document: dict, timeout: float) -> tuple[int, bytes]:
        """POST the document as JSON (as httpx writes it); the status and body of the answer."""
        body = json.dumps(document, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        self.timings.requests += 1
        loop = asyncio.get_running_loop()
        if self.transport is None:
            try:
                async with asyncio.timeout(timeout):
                    await loop.create_connection(lambda: self, self.host, self.port)
            except (TimeoutError, OSError) as error:
                raise RequestFailed(f"connecting: {type(error).__name__} {error}") from None
        self.answer, self.body = loop.create_future(), []
        timer = loop.call_later(timeout, self.give_up, f"no answer in {timeout:g} s")
        self.transport.write(b"POST %b HTTP/1.1\r\n%bContent-Length: %d\r\n\r\n%b"
                             % (path.encode(), self.head, len(body), body))
        try:
            return await self.answer
        finally:
            timer.cancel()
            self.answer = None

    def give_up(self, why: str) -> None:
        """Fail the request outstanding and close the connection: whatever comes on it now belongs to no request."""
        if self.answer is not None and not self.answer.done():
            self.answer.set_exception(RequestFailed(why))
        if self.transport is not None:
            self.transport.abort()
            self.transport = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.parser = httptools.HttpResponseParser(self)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as error:
            self.give_up(f"answer not HTTP: {error}")

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.answer is not None and not self.answer.done():
            self.answer.set_exception(RequestFailed(f"connection closed: {exc}"))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        if self.answer is not None and not self.answer.done():
            self.answer.set_result((self.parser.get_status_code(), b"".join(self.body)))
        if not self.parser.should_keep_alive() and self.transport is not None:
            self.transport.close()
            self.transport = None


class SimulatedWorker:
    """The agent's poller and reporter, with a runner that ends every task at once, successfully."""

    def __init__(self, url: str, join_token: str, name: str, timings: Timings) -> None:
        address = urlsplit(url)
        head = (f"Host: {address.netloc}\r\nAccept: */*\r\nConnection: keep-alive\r\n"
                f"User-Agent: corral-bench-many-workers\r\nAuthorization: Bearer {join_token}\r\n"
                "Content-Type: application/json\r\n").encode()
        self.polls, self.reports = (Connection(address.hostname or "", address.port or 80, head, timings)
                                    for _ in range(2))  # the agent's poller and reporter, a connection each
        self.name, self.timings = name, timings
        self.worker_id = ""
        self.interval = Settings.heartbeat_interval
        self.acted_on: set[tuple[int, int]] = set()
        self.outbox: list[dict] = []  # TaskReports, as the wire has them
        self.outbox_filled = asyncio.Event()
        self.registered = asyncio.Event()

    async def serve(self, registering: asyncio.Semaphore) -> None:
        """Register, then heartbeat at once: a worker silent between the two would be declared lost."""
        async with registering:
            await self.register()
        self.registered.set()
        await asyncio.gather(self.poll(), self.deliver())

    async def register(self) -> None:
        request = {"name": self.name, "address": "127.0.0.1", "capacity": {"cpu": WORKER_CPUS, "memory": 16 << 30}}
        status, body = await self.polls.post(f"{API}/workers", request, REQUEST_TIMEOUT)
        if status >= 400:
            raise RequestFailed(f"registration refused: {status} {body.decode(errors='replace')}")
        reply = json.loads(body)
        self.worker_id, self.interval = reply["worker_id"], reply["heartbeat_interval"]

    async def heartbeat(self, connection: Connection, reports: list[dict], wait: float) -> dict:
        """One heartbeat; the reply as JSON (a HeartbeatReply: `orders` and `heartbeat_interval`)."""
        status, body = await connection.post(f"{API}/workers/{self.worker_id}/heartbeat",
                                             {"reports": reports, "wait": wait}, wait + REQUEST_TIMEOUT)
        if status == 409:
            raise WorkerLost(f"{self.name} declared lost: {body.decode(errors='replace')}")
        if status >= 400:
            raise RequestFailed(f"{status} {body.decode(errors='replace')}")
        return json.loads(body)

    async def poll(self) -> None:
        pace = PACE_FIRST
        while True:
            wait = self.interval
            began = time.perf_counter()
            try:
                reply = await self.heartbeat(self.polls, [], wait)
            except RequestFailed as error:
                self.timings.failures.append(f"{self.name} poll: {type(error).__name__} {error}")
                await asyncio.sleep(PACE_FIRST)
                continue
            took = time.perf_counter() - began
            self.timings.poll_overruns.append(0.0 if reply["orders"] else max(0.0, took - wait))
            if self.dispatch(reply) or not reply["orders"]:
                pace = PACE_FIRST
            else:
                await asyncio.sleep(pace)
                pace = min(pace * 2, self.interval)

    async def deliver(self) -> None:
        while True:
            await self.outbox_filled.wait()
            self.outbox_filled.clear()
            batch = self.outbox[:MAX_REPORTS]
            began = time.perf_counter()
            try:
                reply = await self.heartbeat(self.reports, batch, 0.0)
            except RequestFailed as error:
                self.timings.failures.append(f"{self.name} report: {type(error).__name__} {error}")
                self.outbox_filled.set()
                await asyncio.sleep(PACE_FIRST)
                continue
            self.timings.report_round_trips.append(time.perf_counter() - began)
            del self.outbox[:len(batch)]
            if self.outbox:
                self.outbox_filled.set()
            self.dispatch(reply)

    def dispatch(self, reply: dict) -> bool:
        """Run each new build order to its end at once: its whole life goes to the reporter. True if any was new."""
        self.interval = reply["heartbeat_interval"]
        new = False
        for order in reply["orders"]:
            ref = (order.get("task_id"), order.get("attempt"))
            if order["action"] != "build" or ref in self.acted_on:
                continue
            self.acted_on.add(ref)
            new = True
            world = {"start": "empty", "directory": f"/tmp/{self.name}/{order['task_id']}"}
            self.outbox.extend({"task_id": order["task_id"], "attempt": order["attempt"], "state": state.value,
                                "at": time.time(), "exit_code": 0 if state is ENDED else None,
                                "world": world if state is TaskState.PREPARED else None}
                               for state in LIFE)
        if new:
            self.outbox_filled.set()
        return new


def generate(share: Share, events: multiprocessing.Queue, stop: Event) -> None:
    """A generator process: simulate the share's workers until told to stop, then send back what they saw."""
    asyncio.run(simulate(share, events, stop))


async def simulate(share: Share, events: multiprocessing.Queue, stop: Event) -> None:
    """Put ("registered", FIRST) once every worker of the share is registered, and a Stopped at the end.

    It ends when `stop` is set or as soon as one of its workers fails (declared LOST, or a registration refused).
    """
    timings, cpu_before = Timings(), time.process_time()
    simulated = [SimulatedWorker(share.url, share.join_token, f"sim-{i:04d}", timings)
                 for i in range(share.first, share.first + share.count)]
    try:
        registering = asyncio.Semaphore(share.registering_at_once)
        loops = [asyncio.create_task(worker.serve(registering)) for worker in simulated]
        registered = asyncio.ensure_future(asyncio.gather(*(worker.registered.wait() for worker in simulated)))
        await asyncio.wait([registered, *loops], return_when=asyncio.FIRST_COMPLETED)
        if registered.done():
            events.put(("registered", share.first))
            stopping = asyncio.create_task(stopped(stop))
            await asyncio.wait([stopping, *loops], return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
        registered.cancel()
        failed = [loop for loop in loops if loop.done() and not loop.cancelled() and loop.exception()]
        failure = f"{type(failed[0].exception()).__name__}: {failed[0].exception()}" if failed else None
        for loop in loops:
            loop.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
    finally:
        for worker in simulated:
            worker.polls.give_up("the generator stops")
            worker.reports.give_up("the generator stops")
    timings.cpu_seconds = time.process_time() - cpu_before
    events.put(("stopped", Stopped(share.first, timings, failure)))


async def stopped(stop: Event) -> None:
    """Return once `stop` is set; it is looked at every second, so no thread outlives the loop for long."""
    while not await asyncio.to_thread(stop.wait, 1.0):
        pass


def cpu_seconds(pid: int, children: bool = False) -> float:
    """User and system CPU seconds of a process so far (/proc/PID/stat, fields 14 and 15), with those of its
    children it has waited for (16 and 17: a worker's tasks) where `children`."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(field) for field in fields[11:15 if children else 13]) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    """The most resident memory the process has had (VmHWM of /proc/PID/status), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise ValueError(f"no VmHWM for process {pid}")


def percentiles(values: list[float]) -> str:
    if not values:
        return "none"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (f"p50 {statistics.median(ordered) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, "
            f"max {ordered[-1] * 1000:.0f} ms (n={len(ordered)})")


def shares(cluster: Cluster, workers: int, generators: int) -> list[Share]:
    """The workers split as evenly as they go over the generators, registering REGISTERING_AT_ONCE in all."""
    at_once = math.ceil(REGISTERING_AT_ONCE / generators)
    bounds = [workers * i // generators for i in range(generators + 1)]
    return [Share(cluster.url, cluster.join_token, first, end - first, at_once)
            for first, end in zip(bounds, bounds[1:], strict=False) if end > first]


def drive(cluster: Cluster, workers: int, tasks: int, generators: int, label: str) -> dict:
    """Start the generators, submit the tasks once every worker is registered, and wait until every job has ended."""
    spawning = multiprocessing.get_context("spawn")
    events, stop = spawning.Queue(), spawning.Event()
    processes = [spawning.Process(target=generate, args=(share, events, stop), name=f"load-generator-{share.first}")
                 for share in shares(cluster, workers, generators)]
    for process in processes:
        process.start()
    ends: list[Stopped] = []
    try:
        registered = 0
        while registered + len(ends) < len(processes):
            kind, detail = events.get(timeout=REGISTRATION_DEADLINE)
            registered, ends = (registered + 1, ends) if kind == "registered" else (registered, [*ends, detail])
        if ends:
            return {"outcome": f"abandoned while registering: {ends[0].failure}"}
        print(f"{label}: {workers} workers registered, in {len(processes)} load generator processes", flush=True)
        result = run_tasks(cluster, processes, events, tasks, label, ends)
    finally:
        stop.set()
        ends += stopping(events, len(processes) - len(ends))
        for process in processes:
            process.join(timeout=STOP_DEADLINE)
            if process.is_alive():
                process.kill()
    timings = Timings()
    for end in ends:
        timings.merge(end.timings)
    late_after = LATE_FRACTION * Settings.heartbeat_interval
    return {
        **result,
        "report round trip": percentiles(timings.report_round_trips),
        "long-poll overrun": percentiles(timings.poll_overruns),
        "late long polls": sum(1 for overrun in timings.poll_overruns if overrun > late_after),
        "failed requests": len(timings.failures), "first failure": timings.failures[:1],
        "generator cpu/request": f"{timings.cpu_seconds / max(1, timings.requests) * 1e6:.0f} us "
                                 f"({timings.requests} requests over the generators' lives)",
    }


def run_tasks(cluster: Cluster, processes: list, events: multiprocessing.Queue, tasks: int, label: str,
              ends: list[Stopped]) -> dict:
    """Submit the tasks and wait for the jobs' end, or for a generator to stop early (a worker lost)."""
    pid, admin = cluster.controller.pid, cluster.http
    controller_before = cpu_seconds(pid)
    generators_before = {process.pid: cpu_seconds(process.pid) for process in processes}
    with flame(pid, f"many-workers-{label.lower()}"), \
            flame(processes[0].pid, f"many-workers-{label.lower()}-generator"):
        began = time.perf_counter()
        job_ids = []
        for start in range(0, tasks, JOB_REPLICAS):
            response = admin.post(f"{API}/jobs", json={
                "command": ["true"], "replicas": min(JOB_REPLICAS, tasks - start), "resources": {"cpu": 1}})
            assert response.status_code == 201, response.text
            job_ids.append(response.json()["id"])
        jobs = finished(admin, job_ids, events, ends)
        wall = time.perf_counter() - began
        controller_cpu = cpu_seconds(pid) - controller_before
        generator_cpu = {p: cpu_seconds(p) - before for p, before in generators_before.items()}
    listed = admin.get(f"{API}/workers").json()
    outcome = ("every task SUCCEEDED" if jobs else
               f"abandoned {wall:.0f} s in: {ends[-1].failure if ends else 'no generator left'}")
    assert all(job["state"] == "SUCCEEDED" for job in jobs), [job["state"] for job in jobs]
    seconds = max(job["finished_at"] for job in jobs) - min(job["created_at"] for job in jobs) if jobs else None
    generators_cpu = sum(generator_cpu.values())
    return {
        "outcome": outcome, "tasks/s": tasks / seconds if seconds else None, "seconds": seconds,
        "workers lost": sum(1 for worker in listed if worker["state"] != "ALIVE"),
        "controller cpu s": controller_cpu, "controller cpu share": f"{controller_cpu / wall:.0%} of a core",
        "controller peak rss MiB": peak_rss_mib(pid),
        "generators cpu s": generators_cpu,
        "busiest generator": f"{max(generator_cpu.values()) / wall:.0%} of a core",
        "more CPU used by": ("the load generators: their queueing is in the round trips"
                             if generators_cpu > controller_cpu else "the controller"),
    }


def finished(admin: httpx.Client, job_ids: list[int], events: multiprocessing.Queue,
             ends: list[Stopped]) -> list[dict]:
    """The jobs once all have ended, read once a second until RUN_DEADLINE; none if a generator stopped first."""
    deadline = time.monotonic() + RUN_DEADLINE
    while True:
        jobs = [admin.get(f"{API}/jobs/{job_id}").json() for job_id in job_ids]
        if all(job["finished_at"] is not None for job in jobs):
            return jobs
        if time.monotonic() > deadline:
            raise TimeoutError(f"jobs not done after {RUN_DEADLINE:.0f} s: {[job['state'] for job in jobs]}")
        with contextlib.suppress(queue.Empty):
            kind, detail = events.get(timeout=1.0)
            assert kind == "stopped", kind
            ends.append(detail)
            return []


def stopping(events: multiprocessing.Queue, left: int) -> list[Stopped]:
    """The last words of the `left` generators still running, read before they are joined (a full pipe blocks them)."""
    ends = []
    with contextlib.suppress(queue.Empty):
        while len(ends) < left:
            kind, detail = events.get(timeout=STOP_DEADLINE)
            if kind == "stopped":
                ends.append(detail)
    return ends


def measure(root: Path, db_url: str | None, workers: int, tasks: int, generators: int, label: str) -> dict:
    root.mkdir()
    cluster = Cluster(root, db_url=db_url, heartbeat_interval=Settings.heartbeat_interval,
                      loss_timeout=Settings.loss_timeout)
    cluster.start_controller()
    try:
        return drive(cluster, workers, tasks, generators, label)
    finally:
        cluster.stop(strict=False)  # a slow stop is said, the figures still printed


async def on_postgres(root: Path, workers: int, tasks: int, generators: int) -> dict | None:
    try:
        async with scratch_database() as url:
            return await asyncio.to_thread(measure, root, url, workers, tasks, generators, "PostgreSQL")
    except BaseException as error:  # tests.postgres skips (pytest's exception) where there is no server
        if type(error).__name__ != "Skipped":
            raise
        return None


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=positive, default=1000)
    parser.add_argument("--tasks", type=positive, default=20_000)
    parser.add_argument("--only", choices=("sqlite", "postgres"))
    parser.add_argument("--generators", type=positive, default=max(1, (os.cpu_count() or 1) - 1),
                        help="load generator processes (default: the CPUs less one, at least one)")
    args = parser.parse_args()
    generators = min(args.generators, args.workers)
    print(f"{generators} load generator processes for {args.workers} simulated workers", flush=True)
    results: dict[str, dict | None] = {}
    with tempfile.TemporaryDirectory(prefix="corral-bench-workers-") as tmp:
        if args.only != "postgres":
            results["SQLite"] = measure(Path(tmp) / "sqlite", None, args.workers, args.tasks, generators, "SQLite")
        if args.only != "sqlite":
            results["PostgreSQL"] = asyncio.run(on_postgres(Path(tmp) / "postgres", args.workers, args.tasks,
                                                            generators))
    interval = Settings.heartbeat_interval
    print(f"{args.workers} simulated workers in {generators} load generators, {args.tasks} tasks of `true`, "
          f"heartbeat every {interval:g} s, late = a long poll answered {LATE_FRACTION * interval:g} s past its wait")
    keys = list(dict.fromkeys(key for result in results.values() if result is not None for key in result))
    for key in keys:
        cells = [("skipped: no server at " + POSTGRES_URL) if r is None else _cell(r.get(key, ""))
                 for r in results.values()]
        print(f"  {key:<24} " + "  |  ".join(f"{name}: {cell}" for name, cell in zip(results, cells, strict=True)))


def _cell(value: object) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)


if __name__ == "__main__":
    main()
