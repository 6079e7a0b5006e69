"""`make bench`: what a job's Python environment (`pip`) costs, on an idle local cluster of one worker.

- cold: the first job with a small set (two wheels from a local find-links directory) builds its
  environment; reported as the worker measured the build, and as submit to SUCCEEDED;
- warm: the same short task, with that set (its environment cached) and without `pip`, alternately,
  submit to SUCCEEDED as the client sees it; the ratio of the medians has a target of TARGET_RATIO.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.cluster import Cluster  # noqa: E402  (the same harness the e2e tests use)
from tests.wheels import make_wheel  # noqa: E402

SAMPLES = 20
TARGET_RATIO = 1.2
# The same program both ways: `python` would be the environment's interpreter in one and whatever the worker's PATH
# finds in the other (a pyenv shim costs more than the whole start), which measures the machine, not corral.
COMMAND = ["true"]
PIP = ["thepkg==1.0", "other"]


def run(cluster: Cluster, **spec) -> tuple[float, int]:
    start = time.perf_counter()
    job_id = cluster.submit(command=COMMAND, **spec)
    job = cluster.wait_end(job_id, timeout=300)
    elapsed = time.perf_counter() - start
    assert job["state"] == "SUCCEEDED", job
    return elapsed, job_id


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="corral-bench-") as tmp:
        root = Path(tmp)
        make_wheel(root / "wheels", "thepkg", "1.0")
        make_wheel(root / "wheels", "other", "2.0")
        uv = {"UV_FIND_LINKS": str(root / "wheels"), "UV_NO_INDEX": "1", "UV_CACHE_DIR": str(root / "uv-cache")}
        cluster = Cluster(root, heartbeat_interval=2.0, loss_timeout=30)
        cluster.start_controller()
        cluster.start_worker("bench", 8, env=uv)
        try:
            cold, job_id = run(cluster, pip=PIP)
            [task] = cluster.tasks(job_id)
            build = task["attempts"][-1]["world"]["env_seconds"]
            run(cluster)  # warm-up of the path without an environment
            with_env, without = [], []
            pairs = [(with_env, {"pip": PIP}), (without, {})]
            for sample in range(SAMPLES):  # alternately first, so neither gains from following the other
                for measured, spec in pairs if sample % 2 else reversed(pairs):
                    measured.append(run(cluster, **spec)[0])
        finally:
            cluster.stop(strict=False)  # a slow stop is said, the figures still printed
    warm, bare = statistics.median(with_env), statistics.median(without)
    print(f"environment, cold build of {len(PIP)} local wheels: {build:.2f} s on the worker "
          f"({cold:.2f} s submit to SUCCEEDED)")
    print(f"environment, warm start (cached) vs no pip, submit to SUCCEEDED: median {warm * 1000:.0f} ms vs "
          f"{bare * 1000:.0f} ms, ratio {warm / bare:.2f}x (n={SAMPLES} each; target <= {TARGET_RATIO}x)")


if __name__ == "__main__":
    main()
