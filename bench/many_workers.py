"""A thousand workers against one controller: heartbeats stay on time while 20,000 tasks go through.

One process simulates the workers (asyncio + httpx), each speaking the worker protocol as
corral.worker.agent does, with the protocol's own models: it registers, keeps one long-poll heartbeat
outstanding, and reports every task it is ordered to build as BUILDING, PREPARED, RUNNING and SUCCEEDED
at once, in report heartbeats of their own (wait 0), as the agent's reporter sends them. The controller
is a real one (tests/e2e/cluster.py) with no real worker, at the default heartbeat interval and loss timeout.

Measured, on SQLite and then PostgreSQL: tasks per second from the first submission to the last job's end;
each report heartbeat's round trip (p50/p99/max); each long poll's overrun past its wait (an answer that
comes later than the wait lets the worker's interval slip; one later by half an interval is counted late);
the workers declared LOST (must be none); the controller's CPU seconds and peak RSS (from /proc).
CORRAL_BENCH_FLAMES=1 records a flame graph of the controller while the tasks go through.

    python bench/many_workers.py [--workers 1000] [--tasks 20000] [--only sqlite|postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.flames import flame  # noqa: E402
from corral.controller.settings import ControllerSettings as Settings  # noqa: E402
from corral.core.protocol import (  # noqa: E402
    API,
    MAX_REPORTS,
    AttemptWorld,
    BuildOrder,
    Capacity,
    HeartbeatReply,
    HeartbeatRequest,
    RegisterReply,
    RegisterRequest,
    TaskReport,
)
from corral.core.states import TaskState  # noqa: E402
from corral.worker.agent import PACE_FIRST, REQUEST_TIMEOUT  # noqa: E402
from tests.e2e.cluster import Cluster  # noqa: E402
from tests.postgres import POSTGRES_URL, scratch_database  # noqa: E402

WORKER_CPUS = 8
JOB_REPLICAS = 1000  # the tasks are array jobs of this many `true`s, 1 CPU each
LATE_FRACTION = 0.5  # a long poll answered later than its wait by this part of the interval is late
REGISTERING_AT_ONCE = 20  # a cluster's machines come up over time; a thousand registrations in one instant is a storm
RUN_DEADLINE = 1800.0  # seconds the tasks may take before the run is abandoned
ENDED = TaskState.SUCCEEDED
LIFE = (TaskState.BUILDING, TaskState.PREPARED, TaskState.RUNNING, ENDED)  # what the agent reports of a `true`


@dataclass
class Timings:
    """What every simulated worker saw of the controller's answers, in seconds."""

    report_round_trips: list[float] = field(default_factory=list)
    poll_overruns: list[float] = field(default_factory=list)  # a long poll's answer past its wait, or 0
    failures: list[str] = field(default_factory=list)


class WorkerLost(RuntimeError):
    """The controller declared a simulated worker lost: the run has failed its guarantee and stops."""


class SimulatedWorker:
    """The agent's poller and reporter, with a runner that ends every task at once, successfully."""

    def __init__(self, http: httpx.AsyncClient, name: str, timings: Timings) -> None:
        self.http, self.name, self.timings = http, name, timings
        self.worker_id = ""
        self.interval = Settings.heartbeat_interval
        self.acted_on: set[tuple[int, int]] = set()
        self.outbox: list[TaskReport] = []
        self.outbox_filled = asyncio.Event()
        self.registered = asyncio.Event()

    async def serve(self, registering: asyncio.Semaphore) -> None:
        """Register, then heartbeat at once: a worker silent between the two would be declared lost."""
        async with registering:
            await self.register()
        self.registered.set()
        await asyncio.gather(self.poll(), self.deliver())

    async def register(self) -> None:
        request = RegisterRequest(name=self.name, address="127.0.0.1",
                                  capacity=Capacity(cpu=WORKER_CPUS, memory=16 << 30))
        response = await self.http.post(f"{API}/workers", json=request.model_dump(mode="json"))
        response.raise_for_status()
        reply = RegisterReply.model_validate(response.json())
        self.worker_id, self.interval = reply.worker_id, reply.heartbeat_interval

    async def heartbeat(self, reports: list[TaskReport], wait: float) -> HeartbeatReply:
        body = HeartbeatRequest(reports=reports, wait=wait).model_dump(mode="json")
        response = await self.http.post(f"{API}/workers/{self.worker_id}/heartbeat", json=body,
                                        timeout=wait + REQUEST_TIMEOUT)
        if response.status_code == 409:
            raise WorkerLost(f"{self.name} declared lost: {response.text}")
        response.raise_for_status()
        return HeartbeatReply.model_validate(response.json())

    async def poll(self) -> None:
        pace = PACE_FIRST
        while True:
            wait = self.interval
            began = time.perf_counter()
            try:
                reply = await self.heartbeat([], wait)
            except httpx.HTTPError as error:
                self.timings.failures.append(f"{self.name} poll: {type(error).__name__} {error}")
                await asyncio.sleep(PACE_FIRST)
                continue
            took = time.perf_counter() - began
            self.timings.poll_overruns.append(0.0 if reply.orders else max(0.0, took - wait))
            if self.dispatch(reply) or not reply.orders:
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
                reply = await self.heartbeat(batch, 0.0)
            except httpx.HTTPError as error:
                self.timings.failures.append(f"{self.name} report: {type(error).__name__} {error}")
                self.outbox_filled.set()
                await asyncio.sleep(PACE_FIRST)
                continue
            self.timings.report_round_trips.append(time.perf_counter() - began)
            del self.outbox[:len(batch)]
            if self.outbox:
                self.outbox_filled.set()
            self.dispatch(reply)

    def dispatch(self, reply: HeartbeatReply) -> bool:
        """Run each new build order to its end at once: its whole life goes to the reporter. True if any was new."""
        self.interval = reply.heartbeat_interval
        new = False
        for order in reply.orders:
            ref = (order.task_id, order.attempt)
            if not isinstance(order, BuildOrder) or ref in self.acted_on:
                continue
            self.acted_on.add(ref)
            new = True
            world = AttemptWorld(start="empty", directory=f"/tmp/{self.name}/{order.task_id}")
            self.outbox.extend(TaskReport(task_id=order.task_id, attempt=order.attempt, state=state, at=time.time(),
                                          exit_code=0 if state is ENDED else None,
                                          world=world if state is TaskState.PREPARED else None)
                               for state in LIFE)
        if new:
            self.outbox_filled.set()
        return new


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a process so far (/proc/PID/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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


async def drive(cluster: Cluster, workers: int, tasks: int, label: str) -> dict:
    """Register the workers, submit the tasks, and keep heartbeating until every job has SUCCEEDED."""
    timings = Timings()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=2 * workers)
    async with httpx.AsyncClient(base_url=cluster.url, limits=limits, timeout=REQUEST_TIMEOUT,
                                 headers={"Authorization": f"Bearer {cluster.join_token}"}) as http, \
            httpx.AsyncClient(base_url=cluster.url, timeout=REQUEST_TIMEOUT,
                              headers={"Authorization": f"Bearer {cluster.admin_token}"}) as admin:
        simulated = [SimulatedWorker(http, f"sim-{i:04d}", timings) for i in range(workers)]
        registering = asyncio.Semaphore(REGISTERING_AT_ONCE)
        loops = [asyncio.create_task(worker.serve(registering)) for worker in simulated]
        await asyncio.gather(*(worker.registered.wait() for worker in simulated))
        print(f"{label}: {workers} workers registered", flush=True)
        pid = cluster.controller.pid
        cpu_before, own_before = cpu_seconds(pid), resource.getrusage(resource.RUSAGE_SELF)
        try:
            with flame(pid, f"many-workers-{label.lower()}"):
                began = time.perf_counter()
                job_ids = []
                for start in range(0, tasks, JOB_REPLICAS):
                    response = await admin.post(f"{API}/jobs", json={
                        "command": ["true"], "replicas": min(JOB_REPLICAS, tasks - start), "resources": {"cpu": 1}})
                    assert response.status_code == 201, response.text
                    job_ids.append(response.json()["id"])
                finishing = asyncio.create_task(finished(admin, job_ids))
                await asyncio.wait([finishing, *loops], return_when=asyncio.FIRST_COMPLETED)
                if finishing.done():
                    jobs, outcome = finishing.result(), "every task SUCCEEDED"
                else:
                    finishing.cancel()
                    lost = next(loop.exception() for loop in loops if loop.done())
                    jobs, outcome = [], f"abandoned {time.perf_counter() - began:.0f} s in: {lost}"
        finally:
            for loop in loops:
                loop.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
        own_after = resource.getrusage(resource.RUSAGE_SELF)
        listed = (await admin.get(f"{API}/workers")).json()
    assert all(job["state"] == "SUCCEEDED" for job in jobs), [job["state"] for job in jobs]
    seconds = max(job["finished_at"] for job in jobs) - min(job["created_at"] for job in jobs) if jobs else None
    late_after = LATE_FRACTION * Settings.heartbeat_interval
    return {
        "outcome": outcome, "tasks/s": tasks / seconds if seconds else None, "seconds": seconds,
        "report round trip": percentiles(timings.report_round_trips),
        "long-poll overrun": percentiles(timings.poll_overruns),
        "late long polls": sum(1 for overrun in timings.poll_overruns if overrun > late_after),
        "failed requests": len(timings.failures), "first failure": timings.failures[:1],
        "workers lost": sum(1 for worker in listed if worker["state"] != "ALIVE"),
        "controller cpu s": cpu_seconds(pid) - cpu_before, "controller peak rss MiB": peak_rss_mib(pid),
        "load generator cpu s": own_after.ru_utime + own_after.ru_stime - own_before.ru_utime - own_before.ru_stime,
    }


async def finished(admin: httpx.AsyncClient, job_ids: list[int]) -> list[dict]:
    """The jobs once all have ended, read once a second until RUN_DEADLINE."""
    deadline = time.monotonic() + RUN_DEADLINE
    while True:
        jobs = [(await admin.get(f"{API}/jobs/{job_id}")).json() for job_id in job_ids]
        if all(job["finished_at"] is not None for job in jobs):
            return jobs
        if time.monotonic() > deadline:
            raise TimeoutError(f"jobs not done after {RUN_DEADLINE:.0f} s: {[job['state'] for job in jobs]}")
        await asyncio.sleep(1.0)


def measure(root: Path, db_url: str | None, workers: int, tasks: int, label: str) -> dict:
    root.mkdir()
    cluster = Cluster(root, db_url=db_url, heartbeat_interval=Settings.heartbeat_interval,
                      loss_timeout=Settings.loss_timeout)
    cluster.start_controller()
    try:
        return asyncio.run(drive(cluster, workers, tasks, label))
    finally:
        cluster.stop()


async def on_postgres(root: Path, workers: int, tasks: int) -> dict | None:
    try:
        async with scratch_database() as url:
            return await asyncio.to_thread(measure, root, url, workers, tasks, "PostgreSQL")
    except BaseException as error:  # tests.postgres skips (pytest's exception) where there is no server
        if type(error).__name__ != "Skipped":
            raise
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--only", choices=("sqlite", "postgres"))
    args = parser.parse_args()
    results: dict[str, dict | None] = {}
    with tempfile.TemporaryDirectory(prefix="corral-bench-workers-") as tmp:
        if args.only != "postgres":
            results["SQLite"] = measure(Path(tmp) / "sqlite", None, args.workers, args.tasks, "SQLite")
        if args.only != "sqlite":
            results["PostgreSQL"] = asyncio.run(on_postgres(Path(tmp) / "postgres", args.workers, args.tasks))
    interval = Settings.heartbeat_interval
    print(f"{args.workers} simulated workers, {args.tasks} tasks of `true`, heartbeat every {interval:g} s, "
          f"late = a long poll answered {LATE_FRACTION * interval:g} s past its wait")
    for key in next(r for r in results.values() if r is not None):
        cells = [("skipped: no server at " + POSTGRES_URL) if r is None else _cell(r[key]) for r in results.values()]
        print(f"  {key:<24} " + "  |  ".join(f"{name}: {cell}" for name, cell in zip(results, cells, strict=True)))


def _cell(value: object) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)


if __name__ == "__main__":
    main()
