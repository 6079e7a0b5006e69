"""`make bench`: how soon no process of a worker's attempts is alive after the worker is killed with SIGKILL.

For each sample a fresh worker runs two tasks: `sh -c 'python3 prog.py; echo done'`, and the
same where prog.py daemonizes (fork, setsid, fork again). Once all their processes run, the
worker gets SIGKILL; the figure is the time until no process with the sample's marker in its
argv is alive (polled every 5 ms), median of 10, under each containment the machine offers.
The controller's loss timeout is long, so no retry starts meanwhile. Target: < 5 s.
"""

from __future__ import annotations

import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from corral.worker.containment import cgroup_parent  # noqa: E402
from tests.e2e.cluster import Cluster  # noqa: E402  (the same harness the e2e tests use)
from tests.e2e.test_containment import marked  # noqa: E402
from tests.waiting import wait_for  # noqa: E402
from tests.worker.support import daemonizing_task, written_pids  # noqa: E402

SAMPLES = 10
TARGET = 5.0


def sample(cluster: Cluster, directory: Path, containment: str, n: int) -> float:
    """Seconds from the worker's SIGKILL until none of its attempts' processes is alive."""
    directory.mkdir()
    marker = f"corral-bench-containment-{containment}-{n}"
    plain = directory / "prog.py"
    plain.write_text("import time\ntime.sleep(300)\n")
    daemonizing, prefix = daemonizing_task(directory, f"{marker}-daemon")
    name = f"{containment}-{n}"
    cluster.start_worker(name, 4, "--containment", containment, "--label", f"bench={name}")
    pin = {"constraints": [f"bench={name}"]}  # earlier samples' dead workers still count as alive
    cluster.submit(command=["sh", "-c", f"{sys.executable} {plain} {marker}-plain; echo done"], **pin)
    cluster.submit(command=daemonizing, **pin)
    wait_for(lambda: written_pids(prefix) and any(p.info["cmdline"][:2] == [sys.executable, str(plain)]
                                                  for p in marked(marker)), 30, "both tasks to run")
    began = time.monotonic()
    os.kill(cluster.workers[name].pid, signal.SIGKILL)
    while marked(marker):
        if time.monotonic() - began > 30:
            raise AssertionError(f"processes of {marker} still alive 30 s after the worker's SIGKILL")
        time.sleep(0.005)
    elapsed = time.monotonic() - began
    cluster.workers[name].wait()
    return elapsed


def main() -> None:
    modes = ["cgroup", "processes"] if cgroup_parent() is not None else ["processes"]
    with tempfile.TemporaryDirectory(prefix="corral-bench-containment-") as tmp:
        cluster = Cluster(Path(tmp), loss_timeout=600)
        cluster.start_controller()
        try:
            for mode in modes:
                times = [sample(cluster, Path(tmp) / f"{mode}-{n}", mode, n) for n in range(SAMPLES)]
                median = statistics.median(times)
                print(f"containment {mode}: worker SIGKILL to no process of its attempts alive, median "
                      f"{median * 1000:.0f} ms (min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}, "
                      f"n={SAMPLES}); target < {TARGET:g} s: {'met' if median < TARGET else 'MISSED'}", flush=True)
        finally:
            cluster.stop(strict=False)  # a slow stop is said, the figures still printed


if __name__ == "__main__":
    main()
