"""`make bench`: the router's overhead beside a straight connection to the replica, in one run on loopback.

A real cluster (controller + one worker) serves the tests' small server as a deployment; one
keep-alive HTTP/1.1 load generator then hits the replica directly, through the controller's
router and through a standalone `corral router` (the /serve path): median and p99 latency one
request at a time, and requests/s with concurrent clients. Then a trivial deployment scaled to
zero is timed from a request to its first response (cold start). Only ratios from the same run
are worth comparing; within a run the three paths are measured in interleaved rounds (latency
samples pooled, throughput as each path's median round), so a noisy moment on a shared machine
does not land on one path alone. The CPU time each process spent per request during the throughput run
shows where a machine's cores went: on a small machine the generator, the router and the
replica share them, so the router's own cost bounds the ratio. A second throughput run against
a replica that spends a fixed CPU time per request shows the ratio once the replica does work.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.flames import flame  # noqa: E402
from tests.e2e.cluster import Cluster, free_port  # noqa: E402  (the same harness the e2e tests use)
from tests.waiting import wait_for  # noqa: E402

SERVER = [sys.executable, str(ROOT / "tests" / "serving_app" / "server.py")]
LATENCY_REQUESTS = 2400
THROUGHPUT_SECONDS = 3.0  # per round
ROUNDS = 3
CONCURRENCY = 16
TARGETS = {"p50_overhead_ms": 0.3, "throughput_ratio": 0.70}  # each router beside direct, from one run
WORK_MS = 0.25  # CPU a replica spends per request in the second throughput run, as any real model does at least


class Connection:
    """One keep-alive HTTP/1.1 connection: cheap enough that the generator is not what is measured."""

    def __init__(self, host: str, port: int, path: str, token: str) -> None:
        self.host, self.port = host, port
        self.request = (f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\r\n").encode()

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def get(self) -> int:
        self.writer.write(self.request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in
                   (line.partition(b":") for line in head.split(b"\r\n")[1:] if line)}
        if b"content-length" in headers:
            await self.reader.readexactly(int(headers[b"content-length"]))
        else:  # chunked
            while size := int((await self.reader.readuntil(b"\r\n")).strip(), 16):
                await self.reader.readexactly(size + 2)
            await self.reader.readuntil(b"\r\n")
        return status

    def close(self) -> None:
        self.writer.close()


async def latencies(address: str, path: str, token: str) -> list[float]:
    host, port = address.rsplit(":", 1)
    connection = Connection(host, int(port), path, token)
    await connection.open()
    for _ in range(50):  # warm up
        assert await connection.get() == 200
    samples = []
    for _ in range(LATENCY_REQUESTS // ROUNDS):
        started = time.perf_counter()
        assert await connection.get() == 200
        samples.append(time.perf_counter() - started)
    connection.close()
    return samples


async def throughput(address: str, path: str, token: str) -> float:
    host, port = address.rsplit(":", 1)
    connections = [Connection(host, int(port), path, token) for _ in range(CONCURRENCY)]
    await asyncio.gather(*(c.open() for c in connections))
    done = 0
    deadline = time.perf_counter() + THROUGHPUT_SECONDS

    async def client(connection: Connection) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            assert await connection.get() == 200
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(client(c) for c in connections))
    elapsed = time.perf_counter() - started
    for connection in connections:
        connection.close()
    return done / elapsed


def quantile(samples: list[float], q: float) -> float:
    return sorted(samples)[min(len(samples) - 1, int(q * len(samples)))]


def cold_start(cluster: Cluster) -> float:
    """Seconds from a request to a scaled-to-zero deployment until its first response."""
    response = cluster.http.post("/api/v1/deployments", json={
        "name": "cold", "command": SERVER, "min_replicas": 0, "resources": {"cpu": 0.5},
        "health": {"interval": 0.1, "threshold": 2}})
    assert response.status_code == 201, response.text
    started = time.perf_counter()
    response = cluster.http.get("/serve/cold/health", timeout=120)
    assert response.status_code == 200, response.text
    return time.perf_counter() - started


def cpu_seconds(pid: int | None) -> float:
    """User and system CPU time of a process (this one when None)."""
    if pid is None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rounds(targets: dict[str, tuple[str, str, dict[str, int | None]]], token: str) -> dict[str, tuple[float, dict]]:
    """Each target's median requests/s over ROUNDS interleaved rounds, and the CPU microseconds per request
    of each process in its `pids` over all its rounds."""
    rates: dict[str, list[float]] = {name: [] for name in targets}
    cpu: dict[str, dict[str, float]] = {name: dict.fromkeys(pids, 0.0) for name, (_, _, pids) in targets.items()}
    served = dict.fromkeys(targets, 0.0)
    for _ in range(ROUNDS):
        for name, (address, path, pids) in targets.items():
            before, started = {who: cpu_seconds(pid) for who, pid in pids.items()}, time.perf_counter()
            with _router_flame(pids, name):
                rps = asyncio.run(throughput(address, path, token))
            served[name] += rps * (time.perf_counter() - started)
            rates[name].append(rps)
            for who, pid in pids.items():
                cpu[name][who] += cpu_seconds(pid) - before[who]
    return {name: (statistics.median(rates[name]), {who: used / served[name] * 1e6 for who, used in cpu[name].items()})
            for name in targets}


def _router_flame(pids: dict[str, int | None], name: str) -> contextlib.AbstractContextManager:
    """The router's flame graph during a throughput round (CORRAL_BENCH_FLAMES=1), one file per router."""
    router = pids.get("router")
    return flame(router, "router-" + name.replace("'", "").replace(" ", "-")) if router else contextlib.nullcontext()


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        cluster = Cluster(Path(root))
        cluster.start_controller()
        router = None
        try:
            cluster.start_worker("w1")
            response = cluster.http.post("/api/v1/deployments", json={
                "name": "bench", "command": SERVER, "min_replicas": 1, "resources": {"cpu": 0.5}})
            assert response.status_code == 201, response.text
            replica = wait_for(lambda: next((r for r in cluster.get("/api/v1/deployments/bench")["replica_list"]
                                             if r["state"] == "HEALTHY"), None), 60, "a healthy replica")
            port = free_port()
            router = subprocess.Popen([sys.executable, "-m", "corral", "router", "--controller", cluster.url,
                                       "--port", str(port)], env={**os.environ, "CORRAL_TOKEN": cluster.admin_token})
            wait_for(lambda: _answers(f"http://127.0.0.1:{port}/serve/bench/whoami", cluster.admin_token), 60,
                     "the standalone router")
            token = cluster.admin_token
            replica_pid = httpx.get(f"http://{replica['address']}/whoami", timeout=5).json()["pid"]
            pids = {"replica": replica_pid, "load generator": None}
            targets = {"direct": (replica["address"], "/whoami", pids),
                       "controller's router": (cluster.url.removeprefix("http://"), "/serve/bench/whoami",
                                               {**pids, "router": cluster.controller.pid}),
                       "corral router": (f"127.0.0.1:{port}", "/serve/bench/whoami", {**pids, "router": router.pid})}
            samples: dict[str, list[float]] = {name: [] for name in targets}
            for _ in range(ROUNDS):
                for name, (address, path, _) in targets.items():
                    samples[name] += asyncio.run(latencies(address, path, token))
            rates = rounds(targets, token)
            working = {name: rps for name, (rps, _) in rounds(
                {name: (address, path.replace("/whoami", f"/work?ms={WORK_MS}"), {})
                 for name, (address, path, _) in targets.items()}, token).items()}
            cold = cold_start(cluster)
        finally:
            if router is not None:
                router.terminate()
                router.wait(30)
            cluster.stop(strict=False)  # a slow stop is said, the figures still printed
    print(f"router overhead on loopback, {ROUNDS} interleaved rounds ({LATENCY_REQUESTS} sequential GETs in all "
          f"for latency; {CONCURRENCY} clients for {THROUGHPUT_SECONDS:.0f}s per round, the median round, for "
          "throughput):")
    direct_p50 = statistics.median(samples["direct"])
    direct_rps = rates["direct"][0]
    verdicts = []
    for name, (rps, _) in rates.items():
        p50, p99 = statistics.median(samples[name]), quantile(samples[name], 0.99)
        line = f"  {name:20} p50 {p50 * 1000:6.3f} ms  p99 {p99 * 1000:6.3f} ms  {rps:7,.0f} req/s"
        if name != "direct":
            line += f"   overhead p50 {(p50 - direct_p50) * 1000:.3f} ms, throughput {rps / direct_rps:.0%} of direct"
            verdicts.append(f"  {name:20} overhead {_verdict((p50 - direct_p50) * 1000 < TARGETS['p50_overhead_ms'])}"
                            f", throughput {_verdict(rps / direct_rps >= TARGETS['throughput_ratio'])}")
        print(line)
    print(f"  CPU per request on {os.cpu_count()} cores shared by all (µs):")
    for name, (_, cpu) in rates.items():
        print(f"  {name:20} " + ", ".join(f"{who} {us:.0f}" for who, us in cpu.items()))
    print(f"  targets: p50 overhead < {TARGETS['p50_overhead_ms']} ms, throughput >= "
          f"{TARGETS['throughput_ratio']:.0%} of direct")
    print("\n".join(verdicts))
    print(f"with a replica that spends {WORK_MS} ms of CPU per request:")
    for name, rps in working.items():
        share = f"   {rps / working['direct']:.0%} of direct" if name != "direct" else ""
        print(f"  {name:20} {rps:7,.0f} req/s{share}")
    print(f"cold start of a trivial server, zero to first response: {cold:.2f} s")


def _verdict(met: bool) -> str:
    return "target met" if met else "TARGET MISSED"


def _answers(url: str, token: str) -> bool:
    try:
        return httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    main()
