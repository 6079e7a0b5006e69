"""Several controllers on one PostgreSQL database: what a controller's death costs, and what more of them give.

Prints, from one run:
- failover time: from `kill -9` of the controller that ran ScheduleJobs last to the next placement, made by
  another (a job submitted through a survivor just after the kill), median of 10 (target < 2 s);
- the array bench (500 x `true`) with 1, 2 and 3 controllers on PostgreSQL, side by side (jobs/s);
- requests a standalone router (given every controller's URL) failed while the controller it used was killed,
  three times over (target 0).
Needs the PostgreSQL server tests/postgres.py names.
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.throughput import WORKER_CPUS, WORKLOADS  # noqa: E402
from tests.e2e.cluster import free_port  # noqa: E402
from tests.e2e.controllers import Controllers, requests_through, router_answers  # noqa: E402
from tests.postgres import scratch_database  # noqa: E402
from tests.waiting import wait_for  # noqa: E402

FAILOVER_ROUNDS = 10
ROUTER_KILLS = 3
SERVER = [sys.executable, str(Path(__file__).resolve().parents[1] / "tests" / "serving_app" / "server.py")]


def array_rate(cluster: Controllers, workload: dict) -> float:
    """Jobs per second for one array, submitted through the first controller (controller clock)."""
    response = cluster.request("POST", "/api/v1/jobs", json={
        "command": workload["command"], "replicas": workload["replicas"], "resources": {"cpu": workload["cpu"]}})
    job_id = response.json()["id"]
    job = wait_for(lambda: (j := cluster.get(f"/api/v1/jobs/{job_id}"))["state"] in ("SUCCEEDED", "FAILED") and j,
                   600, "the array to end")
    assert job["state"] == "SUCCEEDED", job
    return workload["replicas"] / (job["finished_at"] - job["created_at"])


def placed_at(cluster: Controllers, job_id: int) -> float | None:
    attempts = cluster.get(f"/api/v1/jobs/{job_id}/tasks")[0]["attempts"]
    return attempts[0]["assigned_at"] if attempts else None


def scheduler_holder(cluster: Controllers) -> int:
    """The number of the live controller that ran ScheduleJobs most recently (the registry says)."""
    runs = {row["url"]: row["handlers"].get("ScheduleJobs", 0) for row in cluster.get("/api/v1/controllers")
            if row["state"] == "live" and row["url"] in cluster.urls}
    return cluster.urls.index(max(runs, key=runs.get))


def failover_seconds(cluster: Controllers) -> float:
    """Kill the controller that schedules; a job submitted through a survivor: seconds from the kill to its
    placement."""
    victim = scheduler_holder(cluster)
    killed = time.time()
    cluster.kill_controller(victim)
    survivor = next(url for n, url in enumerate(cluster.urls) if n != victim)
    response = cluster.http.post(f"{survivor}/api/v1/jobs", json={"command": ["true"], "resources": {"cpu": 1}})
    job_id = response.json()["id"]
    placed = wait_for(lambda: placed_at(cluster, job_id), 60, "the job to be placed after the kill")
    cluster.start_controller(victim)
    return placed - killed


async def with_controllers(count: int, work) -> object:
    async with scratch_database() as url:
        with tempfile.TemporaryDirectory(prefix="corral-bench-controllers-") as tmp:
            cluster = Controllers(Path(tmp), url, count, heartbeat_interval=2.0, loss_timeout=30)
            try:
                cluster.start_all()
                cluster.start_worker("bench", WORKER_CPUS)
                return await asyncio.to_thread(work, cluster)
            finally:
                cluster.stop()


def router_failures(cluster: Controllers) -> Counter:
    """Requests through a standalone router while the controller it talks to is killed, ROUTER_KILLS times."""
    response = cluster.request("POST", "/api/v1/deployments", json={
        "name": "svc", "command": SERVER, "min_replicas": 2, "resources": {"cpu": 0.25},
        "health": {"interval": 0.3, "threshold": 2, "timeout": 2}})
    assert response.status_code == 201, response.text
    port = free_port()
    router = subprocess.Popen(
        [sys.executable, "-m", "corral", "router", "--controller", cluster.url, "--port", str(port)],
        env={**os.environ, "CORRAL_TOKEN": cluster.admin_token},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    router_url = f"http://127.0.0.1:{port}"
    counts = Counter()
    try:
        wait_for(lambda: router_answers(router_url, cluster.admin_token), 90, "the router to route to svc")
        with requests_through(router_url, cluster.admin_token, counts, retries=0):
            for _ in range(ROUTER_KILLS):
                cluster.kill_controller(0)  # the first URL: the one the router talks to while it answers
                time.sleep(2.0)  # the router serves through the death for a while (a bench, not a test)
                cluster.start_controller(0)
                time.sleep(1.0)
    finally:
        os.killpg(router.pid, signal.SIGTERM)
        router.wait(30)
    return counts


def main() -> None:
    workload = WORKLOADS[0]
    rates = {n: asyncio.run(with_controllers(n, lambda c: array_rate(c, workload))) for n in (1, 2, 3)}
    what = f"{workload['name']} {workload['replicas']} x {' '.join(workload['command'])}, PostgreSQL"
    print(f"{what}: " + ", ".join(f"{n} controller{'s' if n > 1 else ''} {rate:.1f} jobs/s"
                                   for n, rate in rates.items())
          + f" ({rates[2] / rates[1]:.2f}x and {rates[3] / rates[1]:.2f}x of one)", flush=True)
    times = asyncio.run(with_controllers(3, lambda c: [failover_seconds(c) for _ in range(FAILOVER_ROUNDS)]))
    print(f"failover, kill -9 of the scheduling controller to the next placement by another: median "
          f"{statistics.median(times):.2f} s (min {min(times):.2f}, max {max(times):.2f}, n={len(times)}; "
          f"target < 2 s)", flush=True)
    counts = asyncio.run(with_controllers(3, router_failures))
    print(f"standalone router through {ROUTER_KILLS} kills of its controller: {counts['answered']} answered, "
          f"{counts['lost']} failed (target 0)", flush=True)


if __name__ == "__main__":
    main()
