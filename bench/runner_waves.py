"""The worker's runner alone, this checkout against another one, interleaved in one run: no controller, no HTTP.

`python bench/runner_waves.py BASE` runs, in turns for each checkout, a process of its own that starts a Runner (in
cgroups where they are writable, with a LogShipper whose sends go nowhere) and gives it waves of 64 one-task orders
of `true` (build and start in one), 512 tasks in all, each wave once the one before has ended, as an array on a
worker of 64 CPUs runs. Printed per task, the median of the runs: the wall time, the runner's own CPU and its
tasks' processes' CPU. These machines are shared: only the ratios between the two lines of one run are worth
comparing.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WAVE, WAVES = 64, 8


async def waves() -> tuple[float, float, float]:
    """(wall, own CPU, children's CPU) per task, in seconds, for this interpreter's corral."""
    from corral.core.protocol import BuildOrder
    from corral.worker.agent import watch_children_by_pidfd
    from corral.worker.logs import LogShipper
    from corral.worker.runner import Runner

    watch_children_by_pidfd()
    ended: set[int] = set()
    wave_over = asyncio.Event()

    def report(report) -> None:
        if report.state in ("SUCCEEDED", "FAILED", "KILLED"):
            assert report.state == "SUCCEEDED", report
            ended.add(report.task_id)
            if len(ended) % WAVE == 0:
                wave_over.set()

    async def send(*_) -> None:
        pass

    with tempfile.TemporaryDirectory(prefix="corral-bench-waves-") as tmp:
        shipper = LogShipper(send)
        runner = Runner(Path(tmp), report=report, fetch_bundle=None, flush_logs=shipper.flush,
                        watch_logs=shipper.watch, name="bench")
        shipping = asyncio.create_task(shipper.run())
        before, started = os.times(), time.perf_counter()
        for wave in range(WAVES):
            wave_over.clear()
            for index in range(wave * WAVE, (wave + 1) * WAVE):
                runner.submit(BuildOrder(task_id=index + 1, attempt=0, job_id=1, task_index=index, command=["true"],
                                         env={}, start=True))
            await wave_over.wait()
        after, wall = os.times(), time.perf_counter() - started
        shipping.cancel()
        await runner.shutdown()
    tasks = WAVE * WAVES
    return (wall / tasks, (after.user - before.user + after.system - before.system) / tasks,
            (after.children_user - before.children_user + after.children_system - before.children_system) / tasks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path, nargs="?", help="the checkout to compare this one with")
    parser.add_argument("--runs", type=int, default=6, help="runs of each checkout")
    parser.add_argument("--one", action="store_true", help="one run of this interpreter's corral (internal)")
    args = parser.parse_args()
    if args.one:
        logging.disable(logging.WARNING)
        print(*asyncio.run(waves()))
        return
    trees = {"base": args.base.resolve(), "this": ROOT}
    runs: dict[str, list[list[float]]] = {name: [] for name in trees}
    for turn in range(args.runs):
        for name in list(trees)[::1 if turn % 2 == 0 else -1]:
            env = {**os.environ, "PYTHONPATH": f"{trees[name] / 'src'}{os.pathsep}{trees[name]}"}
            out = subprocess.run([sys.executable, __file__, "--one"], env=env, check=True, capture_output=True,
                                 text=True).stdout
            runs[name].append([float(field) for field in out.split()])
    for name, results in runs.items():
        wall, own, children = (statistics.median(run[i] for run in results) * 1000 for i in range(3))
        print(f"{name}: {WAVES} waves of {WAVE} x true, per task (medians of {len(results)} runs): wall {wall:.2f} ms, "
              f"the runner's CPU {own:.2f} ms, its tasks' processes' {children:.2f} ms")


if __name__ == "__main__":
    main()
