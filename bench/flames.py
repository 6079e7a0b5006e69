"""Flame graphs of a benchmark's processes, with py-spy, saved under bench/results/ (not committed).

`with flame(pid, "array-controller"):` samples the process for as long as the block runs. Set
CORRAL_BENCH_FLAMES=1 to record them: sampling costs a little CPU, so figures are measured without.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def wanted() -> bool:
    return os.environ.get("CORRAL_BENCH_FLAMES") == "1" and shutil.which("py-spy") is not None


@contextlib.contextmanager
def flame(pid: int, name: str, rate: int = 250) -> Iterator[Path | None]:
    """Record `pid` (and its subprocesses) into bench/results/NAME.svg while the block runs."""
    if not wanted():
        yield None
        return
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{name}.svg"
    recorder = subprocess.Popen(["py-spy", "record", "--pid", str(pid), "--rate", str(rate), "--subprocesses",
                                 "--nonblocking", "--output", str(out)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield out
    finally:
        recorder.send_signal(signal.SIGINT)  # py-spy writes the graph on SIGINT
        try:
            recorder.wait(timeout=30)
        except subprocess.TimeoutExpired:
            recorder.kill()


def flame_of_run(argv: list[str], name: str, env: dict[str, str] | None = None, rate: int = 1000) -> Path:
    """Run `argv` to its end under py-spy into bench/results/NAME.svg: for a process too short-lived to attach to."""
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{name}.svg"
    subprocess.run(["py-spy", "record", "--rate", str(rate), "--output", str(out), "--", *argv],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return out
