"""`make bench`: corral's throughput and latency beside the local Slurm peer, in one run.

Workloads are data (WORKLOADS below). Each prints its figure and, where a peer exists,
the peer's figure and the ratio from the same run: these machines are shared and noisy,
so only ratios from one run are worth comparing. An array is timed twice: on the controller's
clock (created_at to finished_at) and as a user sees it, around `corral submit --wait`; both
are printed beside the machine's raw spawn rate (a bare `Popen(["true"])` loop), the ceiling
of any workload manager here. CORRAL_BENCH_FLAMES=1 records flame graphs of the controller
and the worker during the controller-clock array run (bench/flames.py).

Beside each array it prints the controller's own counts from /metrics, per task: commits (write
transactions) and engine passes, and how busy the store's single writer was (commits/s, ms held per
commit, the share of the run's wall time it was held). The same array then runs on PostgreSQL (a
fresh database on the server tests/postgres.py names), when that server answers. `--array-only`
skips the latency samples and the `submit --wait` run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.flames import flame  # noqa: E402
from bench.peers import ratio_line, slurm, spawn_rate  # noqa: E402
from tests.e2e.cluster import Cluster, wait_for  # noqa: E402  (the same harness the e2e tests use)
from tests.postgres import scratch_database  # noqa: E402

WORKER_CPUS = 64
WORKLOADS = [
    {"name": "array", "replicas": 500, "command": ["true"], "cpu": 1, "peer": ["array", "500"]},
]
LATENCY_SAMPLES = 20
# How often the array's end is looked for. The figure is the controller's clock (created_at to finished_at), which no
# poll moves; each poll reads the job's view (its tasks counted by state), and one every 20 ms took a tenth of the
# controller's CPU during the array, which a user's `corral submit --wait` (the event stream) does not spend.
ARRAY_END_POLL = 0.5


def run_array(cluster: Cluster, workload: dict) -> float:
    """Jobs per second for one job of N replicas, from submission to the job's end (controller clock)."""
    job_id = cluster.submit(command=workload["command"], replicas=workload["replicas"],
                            resources={"cpu": workload["cpu"]})
    job = cluster.wait_end(job_id, timeout=600, every=ARRAY_END_POLL)
    assert job["state"] == "SUCCEEDED", job
    return workload["replicas"] / (job["finished_at"] - job["created_at"])


def controller_counts(cluster: Cluster) -> dict[str, float]:
    """The controller's counters this bench reads from /metrics: commits, seconds the writer was held, passes,
    heartbeats."""
    text = cluster.http.get("/metrics").text
    names = {"commits": "corral_store_write_seconds_count", "held": "corral_store_write_seconds_sum",
             "passes": "corral_engine_passes_total", "heartbeats": "corral_heartbeat_ingest_seconds_count"}
    return {key: float(re.search(rf"^{name} (\S+)$", text, re.M).group(1)) for key, name in names.items()}


def measured_array(cluster: Cluster, workload: dict, flames: str | None = None) -> tuple[float, str]:
    """The array's jobs/s, and a line of what it cost the controller per task and how busy its writer was."""
    before, started = controller_counts(cluster), time.perf_counter()
    if flames:
        with flame(cluster.controller.pid, f"{flames}-controller"), \
                flame(cluster.workers["bench"].pid, f"{flames}-worker"):
            rate = run_array(cluster, workload)
    else:
        rate = run_array(cluster, workload)
    wall = time.perf_counter() - started
    after = controller_counts(cluster)
    commits, held, passes = (after[k] - before[k] for k in ("commits", "held", "passes"))
    tasks = workload["replicas"]
    return rate, (f"commits per task {commits / tasks:.2f}, engine passes per task {passes / tasks:.2f}; "
                  f"writer: {commits / wall:.0f} commits/s, {held / max(commits, 1) * 1000:.2f} ms held per commit, "
                  f"held {held / wall:.0%} of the run")


def start_cluster(root: Path, db_url: str | None = None) -> Cluster:
    cluster = Cluster(root, heartbeat_interval=2.0, loss_timeout=30, db_url=db_url)
    cluster.start_controller()
    cluster.start_worker("bench", cpus=WORKER_CPUS)
    wait_for(lambda: submit_to_running(cluster) >= 0, 30, "a warm-up job")
    return cluster


async def postgres_array(workload: dict) -> tuple[float, str] | None:
    """The same array with the controller on a fresh PostgreSQL database; None without the server."""
    try:
        async with scratch_database() as url:
            with tempfile.TemporaryDirectory(prefix="corral-bench-pg-") as tmp:
                cluster = start_cluster(Path(tmp), db_url=url)
                try:
                    return await asyncio.to_thread(measured_array, cluster, workload)
                finally:
                    cluster.stop(strict=False)  # a slow stop is said, the figures still printed
    except BaseException as error:  # scratch_database skips (a pytest outcome) when there is no server
        if type(error).__name__ != "Skipped":
            raise
        print(f"  PostgreSQL: {error}")
        return None


def run_array_as_user(cluster: Cluster, workload: dict) -> float:
    """Jobs per second for the same job timed around `corral submit --wait`: a CLI start, the upload of the spec,
    the wait for the end as the user's terminal sees it."""
    env = {**os.environ, "CORRAL_URL": cluster.url, "CORRAL_TOKEN": cluster.admin_token}
    argv = [sys.executable, "-m", "corral", "submit", "--no-workdir", "--replicas", str(workload["replicas"]),
            "--cpus", str(workload["cpu"]), "--wait", "--", *workload["command"]]
    start = time.perf_counter()
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL, timeout=600)
    return workload["replicas"] / (time.perf_counter() - start)


def submit_times(cluster: Cluster) -> dict[str, float]:
    """Seconds from submission to each of the task's records (ASSIGNED, BUILDING, ..., SUCCEEDED: when the controller
    wrote them), one job of `true` on an idle cluster."""
    job_id = cluster.submit(command=["true"])
    cluster.wait_end(job_id)
    created = cluster.job(job_id)["created_at"]
    times: dict[str, float] = {}
    for row in cluster.get(f"/api/v1/jobs/{job_id}/history"):
        if row["task_id"]:
            times.setdefault(row["to_state"], row["at"] - created)
    return times


def submit_to_running(cluster: Cluster) -> float:
    """Seconds from submission to the task's RUNNING report, one job on an idle cluster."""
    return submit_times(cluster)["RUNNING"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--array-only", action="store_true", help="only the array, on each store, with its peer")
    array_only = parser.parse_args().array_only
    with tempfile.TemporaryDirectory(prefix="corral-bench-") as tmp:
        cluster = start_cluster(Path(tmp))
        try:
            if not array_only:
                latencies = [submit_to_running(cluster) for _ in range(LATENCY_SAMPLES)]
                print(f"submit-to-RUNNING, idle cluster: median {statistics.median(latencies) * 1000:.0f} ms "
                      f"(min {min(latencies) * 1000:.0f}, max {max(latencies) * 1000:.0f}, n={LATENCY_SAMPLES})")
            for workload in WORKLOADS:
                ours, costs = measured_array(cluster, workload, flames=workload["name"])
                as_user = None if array_only else run_array_as_user(cluster, workload)
                peer = slurm(*workload["peer"])
                spawns = spawn_rate(workload["replicas"])
                what = f"{workload['name']} {workload['replicas']} x {' '.join(workload['command'])}"
                print(ratio_line(what + " (controller clock)", ours, peer), flush=True)
                print(f"  SQLite: {costs}", flush=True)
                if as_user is not None:
                    print(ratio_line(what + " (as a user waits: corral submit --wait)", as_user, peer), flush=True)
                print(f"  raw spawn rate here {spawns:.0f} processes/s: corral reaches {ours / spawns:.0%} of it "
                      f"(controller clock)" + (f", {as_user / spawns:.0%} (as a user waits)" if as_user else ""),
                      flush=True)
                on_postgres = asyncio.run(postgres_array(workload))
                if on_postgres:
                    print(ratio_line(what + " (controller clock, PostgreSQL store)", on_postgres[0], peer), flush=True)
                    print(f"  PostgreSQL: {on_postgres[1]}", flush=True)
        finally:
            cluster.stop(strict=False)  # a slow stop is said, the figures still printed


if __name__ == "__main__":
    main()
