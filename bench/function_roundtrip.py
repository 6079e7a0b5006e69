"""`make bench`: the round trip of a trivial Python function on an idle local cluster.

From `client.submit(lambda: 1)` to the value in hand, as a user's script sees it (client
clock), median of SAMPLES after a warm-up; the target is under TARGET_MS.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from corral import Client  # noqa: E402
from tests.e2e.cluster import Cluster  # noqa: E402  (the same harness the e2e tests use)

SAMPLES = 20
TARGET_MS = 300


def roundtrip(client: Client) -> float:
    start = time.perf_counter()
    value = client.submit(lambda: 1).result(timeout=60)
    elapsed = time.perf_counter() - start
    assert value == 1, value
    return elapsed


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="corral-bench-") as tmp:
        cluster = Cluster(Path(tmp), heartbeat_interval=2.0, loss_timeout=30)
        cluster.start_controller()
        cluster.start_worker("bench", cpus=8)
        try:
            with Client(cluster.url, cluster.admin_token) as client:
                roundtrip(client)  # warm-up: the worker's caches, the interpreter's pages
                times = [roundtrip(client) for _ in range(SAMPLES)]
        finally:
            cluster.stop(strict=False)  # a slow stop is said, the figures still printed
    median = statistics.median(times) * 1000
    print(f"function round trip (lambda: 1, submit to result), idle cluster: median {median:.0f} ms "
          f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}, n={SAMPLES}; target < {TARGET_MS} ms)")


if __name__ == "__main__":
    main()
