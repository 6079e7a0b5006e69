"""The worker's share of a task's way, this checkout against another one, interleaved in one run.

`python bench/worker_ab.py BASE` starts two local clusters (tests/e2e/cluster.py, as bench/throughput.py does),
one running the code of the checkout at BASE (say `git worktree add /tmp/base <commit>`), one this checkout's,
and alternates between them: rounds of ten one-task jobs of `true` on each idle cluster (the median time from
submission to each of the task's records: ASSIGNED, then BUILDING, PREPARED and RUNNING, which one heartbeat
usually carries, then SUCCEEDED), then arrays of 500 × `true` (jobs/s on the controller's clock; the CPU the
worker spent per task, with and without its tasks' own processes, and the controller's; heartbeats per task).
Beside them, from the same run, the local Slurm peer's array and the raw spawn rate. These machines are
shared: only the ratios between the two columns of one run are worth comparing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.peers import slurm, spawn_rate  # noqa: E402
from bench.throughput import WORKLOADS, controller_counts, run_array, start_cluster, submit_times  # noqa: E402
from tests.e2e.cluster import Cluster  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
ARRAY = WORKLOADS[0]


def cpu_seconds(pid: int, children: bool) -> float:
    """The CPU a process has used (its threads'), and with `children` its reaped children's too."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks / TICK


def cluster_of(tree: Path, root: Path) -> Cluster:
    """A cluster whose controller and worker run the code of the checkout at `tree`."""
    root.mkdir(parents=True)
    os.environ["PYTHONPATH"] = f"{tree / 'src'}{os.pathsep}{tree}"
    return start_cluster(root)


def array_costs(cluster: Cluster) -> dict[str, float]:
    worker, controller = cluster.workers["bench"].pid, cluster.controller.pid
    meters = {"worker": lambda: cpu_seconds(worker, True), "worker alone": lambda: cpu_seconds(worker, False),
              "controller": lambda: cpu_seconds(controller, True),
              "heartbeats": lambda: controller_counts(cluster)["heartbeats"]}
    before = {name: meter() for name, meter in meters.items()}
    rate = run_array(cluster, ARRAY)
    tasks = ARRAY["replicas"]
    return {"jobs/s": rate, **{name: (meter() - before[name]) / tasks for name, meter in meters.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path, help="the checkout to compare this one with")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of ten one-task jobs on each cluster")
    parser.add_argument("--arrays", type=int, default=2, help="arrays on each cluster")
    args = parser.parse_args()
    trees = {"base": args.base.resolve(), "this": ROOT}
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    arrays: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory(prefix="corral-bench-ab-") as tmp:
        clusters = {name: cluster_of(tree, Path(tmp) / name) for name, tree in trees.items()}
        try:
            for _ in range(args.rounds):
                for name, cluster in clusters.items():
                    samples[name] += [submit_times(cluster) for _ in range(10)]
            for _ in range(args.arrays):
                for name, cluster in clusters.items():
                    arrays[name].append(array_costs(cluster))
        finally:
            for cluster in clusters.values():
                cluster.stop(strict=False)  # a slow stop is said, the figures still printed
    peer, spawns = slurm(*ARRAY["peer"]), spawn_rate(ARRAY["replicas"])
    for name in trees:
        times = samples[name]
        states = [state for state in times[0] if all(state in sample for sample in times)] if times else []
        print(f"{name}: submit to " + ", ".join(
            f"{state} {statistics.median(sample[state] for sample in times) * 1000:.1f}" for state in states)
            + f" ms (medians of {len(times)})")
        if arrays[name]:
            median = {key: statistics.median(run[key] for run in arrays[name]) for key in arrays[name][0]}
            print(f"{name}: array of {ARRAY['replicas']} x true, {median['jobs/s']:.1f} jobs/s (runs: "
                  + ", ".join(f"{run['jobs/s']:.0f}" for run in arrays[name])
                  + (f"; {median['jobs/s'] / peer:.1f}x the Slurm peer" if peer else "")
                  + f"; {median['jobs/s'] / spawns:.0%} of the raw spawn rate); per task: worker CPU "
                  f"{median['worker'] * 1000:.2f} ms ({median['worker alone'] * 1000:.2f} without its tasks' "
                  f"processes), controller {median['controller'] * 1000:.2f} ms, {median['heartbeats']:.3f} "
                  "heartbeats")
    print(f"Slurm peer array {ARRAY['replicas']}: " + (f"{peer:.1f} jobs/s" if peer else "unavailable")
          + f"; raw spawn rate {spawns:.0f} processes/s")


if __name__ == "__main__":
    main()
