"""`make bench`: how late a job's retry is created, against the due time its backoff set.

Each workload submits always-failing jobs with a retry policy on a local cluster and reads,
for every retry, the gap between the parent's `retry_due_at` and the child's `created_at`
(both stamped by the controller, so one clock). "chain" is one job retried 50 times in a
row, each retry alone; "burst" is 50 jobs failing together, their retries due together.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.cluster import Cluster, wait_for  # noqa: E402  (the same harness the e2e tests use)

WORKLOADS = [
    {"name": "chain", "jobs": 1, "max_retries": 50, "retry_delay": 0.2},
    {"name": "burst", "jobs": 50, "max_retries": 1, "retry_delay": 0.5},
]
TARGET_MEDIAN = 0.200  # seconds


def retry_gaps(cluster: Cluster, workload: dict) -> list[float]:
    policy = {"max_retries": workload["max_retries"], "retry_delay": workload["retry_delay"], "jitter": "none"}
    firsts = [cluster.submit(command=["false"], resources={"cpu": 0.1}, retry_policy=policy)
              for _ in range(workload["jobs"])]
    length = workload["max_retries"] + 1
    gaps = []
    for first in firsts:
        chain = wait_for(lambda f=first: len(c := cluster.get(f"/api/v1/jobs/{f}/attempts")) == length
                         and c[-1]["finished_at"] and c, 600, f"the chain of job {first}")
        for parent, child in zip(chain, chain[1:], strict=False):
            gaps.append(child["created_at"] - cluster.job(parent["id"])["retry_due_at"])
    return gaps


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="corral-bench-") as tmp:
        cluster = Cluster(Path(tmp), heartbeat_interval=2.0, loss_timeout=30)
        cluster.start_controller()
        cluster.start_worker("bench", cpus=64)
        try:
            for workload in WORKLOADS:
                gaps = retry_gaps(cluster, workload)
                median = statistics.median(gaps)
                verdict = "within" if median < TARGET_MEDIAN else "OVER"
                print(f"retry delay accuracy, {workload['name']} ({len(gaps)} retries, delay "
                      f"{workload['retry_delay']}s): due -> created median {median * 1000:.1f} ms, "
                      f"worst {max(gaps) * 1000:.1f} ms, best {min(gaps) * 1000:.1f} ms "
                      f"({verdict} the {TARGET_MEDIAN * 1000:.0f} ms target)", flush=True)
        finally:
            cluster.stop(strict=False)  # a slow stop is said, the figures still printed


if __name__ == "__main__":
    main()
