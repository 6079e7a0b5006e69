"""What a job costs each process, for comparing two trees in turns: `python bench/cpu_per_job.py sep|arr [ROUNDS]`.

Not part of `make bench` (it has no peer): a measuring tool for a change that touches the hot path, as
bench/worker_ab.py. One cluster (one worker of 64 CPUs, as bench/throughput.py) runs ROUNDS rounds of one workload:
`sep`, bench/separate_jobs.py's 2,000 jobs of `true` by 8 clients, one call each, until all ended; `arr`,
bench/throughput.py's array of 500 × `true`. Each round prints the rate, the controller's CPU a job, the worker's with
its tasks' (the children it reaped), how busy the whole machine was (/proc/stat), and the controller's commits, share
of the time its writer was held, and engine passes (its /metrics). CPU a job is steadier than the rate on a shared
machine: run the base and the change in turns (PYTHONPATH=<tree>/src), several rounds each.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import separate_jobs  # noqa: E402
from bench.many_workers import cpu_seconds, positive  # noqa: E402
from bench.throughput import WORKER_CPUS, WORKLOADS, controller_counts, run_array  # noqa: E402
from tests.e2e.cluster import Cluster  # noqa: E402

ARRAY = WORKLOADS[0]


def machine_busy() -> tuple[int, int]:
    """The machine's busy and total clock ticks so far, all CPUs (/proc/stat's first line; idle and iowait idle)."""
    ticks = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)


def one_round(cluster: Cluster, workload: str) -> str:
    controller, worker = cluster.controller.pid, cluster.workers["bench"].pid
    before = cpu_seconds(controller), cpu_seconds(worker, children=True), machine_busy(), controller_counts(cluster)
    started = time.perf_counter()
    if workload == "sep":
        jobs, rate = separate_jobs.JOBS, separate_jobs.timed_until_ended(cluster, separate_jobs.one_call_each)[1]
    else:
        jobs, rate = ARRAY["replicas"], run_array(cluster, ARRAY)
    wall = time.perf_counter() - started
    after = cpu_seconds(controller), cpu_seconds(worker, children=True), machine_busy(), controller_counts(cluster)
    busy = (after[2][0] - before[2][0]) / max(after[2][1] - before[2][1], 1)
    counts = {key: after[3][key] - before[3][key] for key in after[3]}
    return (f"{workload}: {rate:7.1f} jobs/s; ms of CPU a job: controller {1000 * (after[0] - before[0]) / jobs:.2f}, "
            f"worker and tasks {1000 * (after[1] - before[1]) / jobs:.2f}; machine {busy:.0%} busy; a job: commits "
            f"{counts['commits'] / jobs:.2f}, engine passes {counts['passes'] / jobs:.2f}; writer held "
            f"{counts['held'] / wall:.0%} of the time")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("workload", choices=["sep", "arr"])
    parser.add_argument("rounds", type=positive, nargs="?", default=1)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="corral-cpu-") as tmp:
        cluster = Cluster(Path(tmp), heartbeat_interval=2.0, loss_timeout=30)
        cluster.start_controller()
        cluster.start_worker("bench", cpus=WORKER_CPUS)
        try:
            cluster.wait_end(cluster.submit(command=["true"], resources={"cpu": 1}), timeout=60)  # warm-up
            for _ in range(arguments.rounds):
                print(one_round(cluster, arguments.workload), flush=True)
        finally:
            cluster.stop(strict=False)


if __name__ == "__main__":
    main()
