"""`make bench`: corral's throughput and latency beside the local Slurm peer, in one run.

Workloads are data (WORKLOADS below). Each prints its figure and, where a peer exists,
the peer's figure and the ratio from the same run: these machines are shared and noisy,
so only ratios from one run are worth comparing.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.peers import ratio_line, slurm  # noqa: E402
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
                ours = run_array(cluster, workload)
                peer = slurm(*workload["peer"])
                what = f"{workload['name']} {workload['replicas']} x {' '.join(workload['command'])}"
                print(ratio_line(what, ours, peer), flush=True)
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
