"""What every benchmark measures corral against, in the same run: the local Slurm peer and the bare machine.

Only ratios from one run are worth comparing on a shared machine, so a benchmark measures its peer
and the machine's own floor (a bare interpreter start, a bare process spawn) beside its own figure.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Beside the checkout, or where CORRAL_SLURM_PEER says (a worktree lives deeper than the main checkout).
SLURM_PEER = Path(os.environ.get("CORRAL_SLURM_PEER", ROOT.parent / "shared" / "bench" / "slurm-peer.sh"))


def slurm(*args: str) -> float | None:
    """Jobs per second the local Slurm peer gives (`slurm-peer.sh array N` or `loop N C`), None without one."""
    if not SLURM_PEER.exists():
        return None
    done = subprocess.run(["bash", str(SLURM_PEER), *args], capture_output=True, text=True, timeout=900)
    match = re.search(r"([0-9.]+) jobs/s", done.stdout)
    if not match:
        print(f"  slurm peer failed: {done.stderr.strip()[-300:]}")
        return None
    return float(match.group(1))


def ratio_line(what: str, ours: float, peer: float | None, unit: str = "jobs/s") -> str:
    line = f"{what}: corral {ours:.1f} {unit}"
    if peer:
        return line + f", slurm {peer:.1f} {unit}, ratio {ours / peer:.1f}x"
    return line + ", slurm peer unavailable"


def run_seconds(argv: list[str], env: dict | None = None) -> float:
    """The wall time of running `argv` to its end."""
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def beside_bare_python(argv: list[str], samples: int = 7, env: dict | None = None) -> tuple[float, float]:
    """The median wall times of `argv` and of a bare `python -c pass` (the floor any Python command stands on), run
    in turns: on a shared machine the load moves within seconds, and both medians see the same moments."""
    ours, bare = [], []
    for _ in range(samples):
        ours.append(run_seconds(argv, env))
        bare.append(run_seconds([sys.executable, "-c", "pass"]))
    return statistics.median(ours), statistics.median(bare)


def spawn_rate(count: int = 500) -> float:
    """Processes per second a bare `Popen(["true"])` loop reaches here: the floor of running anything."""
    start = time.perf_counter()
    for _ in range(count):
        subprocess.Popen(["true"]).wait()
    return count / (time.perf_counter() - start)
