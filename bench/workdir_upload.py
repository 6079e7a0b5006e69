"""`make bench`: what submitting from a 50 MB working directory costs when a worker does not share it.

A local cluster whose one worker behaves as if on another machine (another file-system id), so
`corral submit` must upload the directory: 50 files of 1 MB of random bytes (incompressible).
The first submission bundles and uploads it; the second, of the same tree, neither archives nor
sends it: the client remembers the tree's digest (TreeMemo) and the controller still has it.
Requests and bytes sent are counted on the client's own transport.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from corral.cli.main import main  # noqa: E402
from corral.client.http import Client  # noqa: E402
from corral.filesystem import OVERRIDE  # noqa: E402
from tests.e2e.cluster import Cluster  # noqa: E402  (the same harness the e2e tests use)

FILES, FILE_SIZE = 50, 2**20


class CountingTransport(httpx.HTTPTransport):
    """Counts requests by method and the bytes of their bodies."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: Counter[str] = Counter()
        self.sent = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests[request.method] += 1
        self.sent += len(request.read())
        return super().handle_request(request)


def submit(cluster: Cluster, tree: Path) -> tuple[float, Counter[str], int]:
    """Seconds for one `corral submit --workdir TREE -- true`, its requests by method, and bytes sent."""
    transport = CountingTransport()
    with Client(cluster.url, cluster.admin_token, transport=transport, timeout=120) as client:
        started = time.perf_counter()
        result = CliRunner().invoke(main, ["submit", "--workdir", str(tree), "--", "true"], obj={"client": client})
        seconds = time.perf_counter() - started
    if result.exit_code != 0:
        raise SystemExit(f"submit failed: {result.output}")
    return seconds, transport.requests, transport.sent


def main_() -> None:
    with tempfile.TemporaryDirectory(prefix="corral-bench-") as tmp:
        os.environ["XDG_CACHE_HOME"] = str(Path(tmp) / "cache")  # an empty memo: the first submission archives
        tree = Path(tmp) / "tree"
        tree.mkdir()
        for i in range(FILES):
            (tree / f"part-{i:02d}.bin").write_bytes(os.urandom(FILE_SIZE))
        cluster = Cluster(Path(tmp))
        cluster.start_controller()
        cluster.start_worker("elsewhere", env={OVERRIDE: "e" * 32})
        try:
            size = FILES * FILE_SIZE / 1e6
            for label in ("first", "second"):
                seconds, requests, sent = submit(cluster, tree)
                calls = ", ".join(f"{n} {method}" for method, n in sorted(requests.items()))
                print(f"workdir upload, {label} submission of {FILES} x 1 MiB random files ({size:.0f} MB): "
                      f"{seconds:.2f} s, {sent / 1e6:.1f} MB sent ({calls})", flush=True)
        finally:
            cluster.stop(strict=False)  # a slow stop is said, the figures still printed


if __name__ == "__main__":
    main_()
