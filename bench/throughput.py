"""`make bench`: corral's throughput and latency beside the local Slurm peer, in one run.

Workloads are data (WORKLOADS below). Each prints its figure and, where a peer exists,
the peer's figure and the ratio from the same run: these machines are shared and noisy,
so only ratios from one run are worth comparing. An array is timed twice: on the controller's
clock (created_at to finished_at) and as a user sees it, around `corral submit --wait`; both
are printed beside the machine's raw spawn rate (a bare `Popen(["true"])` loop), the ceiling
of any workload manager here. CORRAL_BENCH_FLAMES=1 records flame graphs of the controller
and the worker during the controller-clock array run (bench/flames.py).
"""

from __future__ import annotations

import os
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

WORKER_CPUS = 64
WORKLOADS = [
    {"name": "array", "replicas": 500, "command": ["true"], "cpu": 1, "peer": ["array", "500"]},
]
LATENCY_SAMPLES = 20


def run_array(cluster: Cluster, workload: dict) -> float:
    """Jobs per second for one job of N replicas, from submission to the job's end (controller clock)."""
    job_id = cluster.submit(command=workload["command"], replicas=workload["replicas"],
                            resources={"cpu": workload["cpu"]})
    job = cluster.wait_end(job_id, timeout=600)
    assert job["state"] == "SUCCEEDED", job
    return workload["replicas"] / (job["finished_at"] - job["created_at"])


def run_array_as_user(cluster: Cluster, workload: dict) -> float:
    """Jobs per second for the same job timed around `corral submit --wait`: a CLI start, the upload of the spec,
    the wait for the end as the user's terminal sees it."""
    env = {**os.environ, "CORRAL_URL": cluster.url, "CORRAL_TOKEN": cluster.admin_token}
    argv = [sys.executable, "-m", "corral", "submit", "--no-workdir", "--replicas", str(workload["replicas"]),
            "--cpus", str(workload["cpu"]), "--wait", "--", *workload["command"]]
    start = time.perf_counter()
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL, timeout=600)
    return workload["replicas"] / (time.perf_counter() - start)


def submit_to_running(cluster: Cluster) -> float:
    """Seconds from submission to the task's RUNNING report, one job on an idle cluster."""
    job_id = cluster.submit(command=["true"])
    cluster.wait_end(job_id)
    history = cluster.get(f"/api/v1/jobs/{job_id}/history")
    running = next(h["at"] for h in history if h["to_state"] == "RUNNING" and h["task_id"])
    return running - cluster.job(job_id)["created_at"]


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="corral-bench-") as tmp:
        cluster = Cluster(Path(tmp), heartbeat_interval=2.0, loss_timeout=30)
        cluster.start_controller()
        cluster.start_worker("bench", cpus=WORKER_CPUS)
        try:
            wait_for(lambda: submit_to_running(cluster) >= 0, 30, "a warm-up job")
            latencies = [submit_to_running(cluster) for _ in range(LATENCY_SAMPLES)]
            print(f"submit-to-RUNNING, idle cluster: median {statistics.median(latencies) * 1000:.0f} ms "
                  f"(min {min(latencies) * 1000:.0f}, max {max(latencies) * 1000:.0f}, n={LATENCY_SAMPLES})")
            for workload in WORKLOADS:
                with flame(cluster.controller.pid, f"{workload['name']}-controller"), \
                        flame(cluster.workers["bench"].pid, f"{workload['name']}-worker"):
                    ours = run_array(cluster, workload)
                as_user = run_array_as_user(cluster, workload)
                peer = slurm(*workload["peer"])
                spawns = spawn_rate(workload["replicas"])
                what = f"{workload['name']} {workload['replicas']} x {' '.join(workload['command'])}"
                print(ratio_line(what + " (controller clock)", ours, peer), flush=True)
                print(ratio_line(what + " (as a user waits: corral submit --wait)", as_user, peer), flush=True)
                print(f"  raw spawn rate here {spawns:.0f} processes/s: corral reaches {ours / spawns:.0%} of it "
                      f"(controller clock), {as_user / spawns:.0%} (as a user waits)", flush=True)
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
