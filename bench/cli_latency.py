"""`make bench`: how long the `corral` command takes, beside a bare interpreter start, in the same run.

The median wall time of SAMPLES runs of `corral --help`, `corral jobs` over 100 jobs and
`corral submit --wait -- true` (on an idle local cluster: a controller and one worker, the e2e
harness), each printed with the median of `python -c pass` run in turns with it, and the ratio to
it. The targets are the ratios in TARGETS. corral runs as an installed one does, with its bytecode
cached (PYTHONDONTWRITEBYTECODE is dropped). With CORRAL_BENCH_FLAMES=1, py-spy records one run of
each into bench/results/.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.flames import flame_of_run, wanted  # noqa: E402
from bench.peers import beside_bare_python, run_seconds  # noqa: E402
from tests.e2e.cluster import Cluster  # noqa: E402  (the same harness the e2e tests use)

SAMPLES = 7
LISTED = 100
# Most times a bare interpreter start each command may take.
TARGETS = {"--help": 10, "jobs": 15, "submit --wait -- true": 15}


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="corral-bench-") as tmp:
        cluster = Cluster(Path(tmp), heartbeat_interval=2.0, loss_timeout=30)
        cluster.start_controller()
        cluster.start_worker("bench", cpus=8)
        try:
            for _ in range(LISTED):
                cluster.submit(command=["true"])
            cluster.wait_end(cluster.submit(command=["true"]), timeout=120)  # the worker is warm
            env = {**os.environ, "CORRAL_URL": cluster.url, "CORRAL_TOKEN": cluster.admin_token,
                   "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            corral = [sys.executable, "-m", "corral"]
            commands = {"--help": ["--help"], "jobs": ["jobs", "--limit", str(LISTED)],
                        "submit --wait -- true": ["submit", "--wait", "--", "true"]}
            for what, args in commands.items():
                run_seconds(corral + args, env)  # a first run writes the bytecode
                seconds, bare = beside_bare_python(corral + args, SAMPLES, env)
                ratio = seconds / bare
                verdict = "ok" if ratio <= TARGETS[what] else "over"
                print(f"corral {what}: median {seconds * 1000:.0f} ms, bare python {bare * 1000:.0f} ms, "
                      f"ratio {ratio:.1f}x (target <= {TARGETS[what]}x: {verdict})")
                if wanted():
                    flame_of_run(corral + args, "cli-" + args[0].strip("-"), env)
        finally:
            cluster.stop(strict=False)  # a slow stop is said, the figures still printed


if __name__ == "__main__":
    main()
