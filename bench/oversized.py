"""Controller memory (RSS) before and after 1,000 refused requests of a few MB each: it must stay flat.

Two rounds of 1,000 on one controller. "413": 5 MB bodies over the request limit, half with
their Content-Length (refused before a byte is read), half streamed without one (refused once
the limit is passed). "422": 3.5 MB bodies under the request limit whose env value is over its
cap, so they are parsed and validated before the refusal. Nothing of them may stay behind: RSS
is sampled every 250 requests, after a short warm-up of the same kind.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.cluster import Cluster  # noqa: E402  (the same harness the e2e tests use)

REQUESTS = 1000
WARM_UP = 50
SAMPLE_EVERY = 250
MB = 10**6


def oversized(size: int) -> bytes:
    return b'{"command": ["true"], "env": {"A": "' + b"x" * size + b'"}}'


OVER_LIMIT = oversized(5 * MB)
FIELD_OVER_CAP = oversized(int(3.5 * MB))


def streamed() -> Iterator[bytes]:
    for start in range(0, len(OVER_LIMIT), 2**16):
        yield OVER_LIMIT[start:start + 2**16]


def over_limit(number: int) -> tuple[object, int]:
    return (OVER_LIMIT if number % 2 else streamed()), 413


def field_over_cap(number: int) -> tuple[object, int]:
    return FIELD_OVER_CAP, 422


def rss(process: psutil.Process) -> float:
    return process.memory_info().rss / 2**20


def round_of(http: httpx.Client, controller: psutil.Process, name: str, request) -> None:
    def send(number: int) -> None:
        body, expected = request(number)
        response = http.post("/api/v1/jobs", content=body, headers={"content-type": "application/json"})
        if response.status_code != expected:
            raise SystemExit(f"{name} request {number}: HTTP {response.status_code}, expected {expected}: "
                             f"{response.text[:200]}")

    for number in range(WARM_UP):
        send(number)
    samples = [rss(controller)]
    started = time.monotonic()
    for number in range(REQUESTS):
        send(number)
        if (number + 1) % SAMPLE_EVERY == 0:
            samples.append(rss(controller))
    elapsed = time.monotonic() - started
    print(f"oversized requests, {name}: {REQUESTS} refused in {elapsed:.1f}s; controller RSS {samples[0]:.1f} MiB "
          f"before, {samples[-1]:.1f} MiB after ({samples[-1] - samples[0]:+.1f} MiB); every {SAMPLE_EVERY}: "
          f"{', '.join(f'{sample:.1f}' for sample in samples)} MiB", flush=True)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="corral-bench-") as tmp:
        cluster = Cluster(Path(tmp))
        cluster.start_controller()
        try:
            controller = psutil.Process(cluster.controller.pid)
            headers = {"Authorization": f"Bearer {cluster.admin_token}"}
            with httpx.Client(base_url=cluster.url, headers=headers, timeout=60) as http:
                print(f"controller RSS at start: {rss(controller):.1f} MiB", flush=True)
                round_of(http, controller, "413 (body over the 4 MiB limit, declared or streamed)", over_limit)
                round_of(http, controller, "422 (an env value over its cap, parsed)", field_over_cap)
                jobs = http.get("/api/v1/jobs", params={"count": True}).json()["total"]
            print(f"jobs stored: {jobs}", flush=True)
        finally:
            cluster.stop(strict=False)  # a slow stop is said, the figures still printed


if __name__ == "__main__":
    main()
