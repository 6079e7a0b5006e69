"""`make bench`: many separate jobs, each its own API call, beside the Slurm peer's `sbatch` loop, in one run.

A real cluster (one worker of 64 CPUs, as bench/throughput.py) gets JOBS jobs of `true` from CLIENTS
concurrent clients (threads, each with its own keep-alive connection), each POSTing its share one job
per call; the figure is jobs per second from the first POST until every job is terminal. The same
number of jobs then go through the batch submit (POST /api/v1/jobs/batch, one call per client).
Each is given twice: accepted (until the last call returns: the API's part) and ended (the engine's
and the worker's too), with the controller's CPU per job over each part (/proc: what the rate is bound by on
a busy machine, and steadier than the rate).
The peer is `slurm-peer.sh loop JOBS CLIENTS` (as many `sbatch` calls by as many concurrent shells),
measured in the same run. Beside each part: the share of its wall time the store's single writer was held (a
write transaction open), the ceiling of a store that takes one writer at a time. Both parts then run again with
the controller on a fresh PostgreSQL database (the server tests/postgres.py names), when that server answers.
The store alone (SQLite, in this process) gives the ceiling the single writer sets: jobs written one
transaction (one durable commit) each, and a thousand to a transaction.
With CORRAL_BENCH_FLAMES=1 the controller is profiled during the
separate submissions (bench/results/separate-jobs-controller.svg, -postgres.svg on PostgreSQL).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.flames import flame  # noqa: E402
from bench.many_workers import cpu_seconds  # noqa: E402
from bench.peers import ratio_line, slurm  # noqa: E402
from bench.throughput import controller_counts  # noqa: E402
from corral.core.spec import JobSpec  # noqa: E402
from corral.core.spec_text import MAX_BATCH  # noqa: E402
from corral.core.states import JOB_ACTIVE  # noqa: E402
from corral.store.database import sqlite_url  # noqa: E402
from corral.store.jobs import insert_job  # noqa: E402
from corral.store.store import Store  # noqa: E402
from tests.e2e.cluster import Cluster, wait_for  # noqa: E402  (the same harness the e2e tests use)
from tests.postgres import scratch_database  # noqa: E402

JOBS = int(sys.argv[1]) if __name__ == "__main__" and len(sys.argv) > 1 else 2000  # imported: the default
CLIENTS = 8
WORKER_CPUS = 64
SPEC = {"command": ["true"], "resources": {"cpu": 1}}
UNENDED = sorted(state.value for state in JOB_ACTIVE)


def unended(cluster: Cluster) -> int:
    return cluster.get("/api/v1/jobs", state=UNENDED, limit=1, count="true")["total"]


def timed_until_ended(cluster: Cluster, submit_share) -> tuple[float, float, float, float, float]:
    """Jobs per second, accepted (until the last call returns) and ended (until every job is terminal), the
    controller's CPU ms per job over each of the two parts, and the share of the whole that the store's writer was
    held: CLIENTS threads each run `submit_share(http, count)`."""
    shares = [JOBS // CLIENTS + (1 if i < JOBS % CLIENTS else 0) for i in range(CLIENTS)]
    headers = {"Authorization": f"Bearer {cluster.admin_token}"}
    clients = [httpx.Client(base_url=cluster.url, headers=headers, timeout=120) for _ in range(CLIENTS)]
    controller = cluster.controller.pid
    try:
        held = controller_counts(cluster)["held"]
        cpu, start = cpu_seconds(controller), time.perf_counter()
        with ThreadPoolExecutor(CLIENTS) as pool:
            list(pool.map(submit_share, clients, shares))
        accepted, cpu_accepted = JOBS / (time.perf_counter() - start), cpu_seconds(controller)
        wait_for(lambda: unended(cluster) == 0, 900, f"{JOBS} jobs to end")
        wall, cpu_ended = time.perf_counter() - start, cpu_seconds(controller)
        held = (controller_counts(cluster)["held"] - held) / wall
        return accepted, JOBS / wall, 1000 * (cpu_accepted - cpu) / JOBS, 1000 * (cpu_ended - cpu_accepted) / JOBS, held
    finally:
        for client in clients:
            client.close()


def one_call_each(http: httpx.Client, count: int) -> None:
    for _ in range(count):
        response = http.post("/api/v1/jobs", json=SPEC)
        assert response.status_code == 201, response.text


def one_batch(http: httpx.Client, count: int) -> None:
    response = http.post("/api/v1/jobs/batch", json={"jobs": [SPEC] * count})
    assert response.status_code == 201, response.text


async def store_ceiling(directory: Path, per_transaction: int) -> float:
    """Jobs per second the store alone writes, `per_transaction` jobs (rows and history) to each commit."""
    store = await Store.open(sqlite_url(directory / f"ceiling-{per_transaction}.db"))
    spec = JobSpec.model_validate(SPEC)
    try:
        start = time.perf_counter()
        for _ in range(JOBS // per_transaction):
            async with store.write() as connection:
                for _ in range(per_transaction):
                    await insert_job(connection, spec, None, time.time())
        return JOBS // per_transaction * per_transaction / (time.perf_counter() - start)
    finally:
        await store.close()


def report(how: str, figures: tuple[float, float, float, float, float], peer: float | None) -> None:
    accepted, ended, cpu_accepting, cpu_ending, held = figures
    what = f"{JOBS} jobs of true, {CLIENTS} clients, {how}"
    print(ratio_line(f"{what}, accepted", accepted, peer), flush=True)
    print(ratio_line(f"{what}, all ended", ended, peer), flush=True)
    print(f"{what}: controller CPU per job {cpu_accepting:.2f} ms until accepted, {cpu_ending:.2f} ms more until "
          f"all ended; the store's writer held {held:.0%} of the time", flush=True)


def both_parts(root: Path, peer: float | None, db_url: str | None = None) -> None:
    """The separate calls, then the batches, on a cluster of its own (its store on `db_url`, else SQLite)."""
    store = " (PostgreSQL store)" if db_url else ""
    cluster = Cluster(root, heartbeat_interval=2.0, loss_timeout=30, db_url=db_url)
    cluster.start_controller()
    cluster.start_worker("bench", cpus=WORKER_CPUS)
    try:
        cluster.wait_end(cluster.submit(**SPEC), timeout=60)  # warm-up
        flames = "-postgres" if db_url else ""
        with flame(cluster.controller.pid, f"separate-jobs-controller{flames}"):
            separate = timed_until_ended(cluster, one_call_each)
        report(f"one call each{store}", separate, peer)
        with flame(cluster.controller.pid, f"batch-jobs-controller{flames}"):
            batched = timed_until_ended(cluster, one_batch)
        report(f"one batch call each{store}", batched, peer)
    finally:
        cluster.stop(strict=False)  # a slow stop is said, the figures still printed


async def on_postgres(peer: float | None) -> None:
    """Both parts with the controller on a fresh PostgreSQL database; said and skipped without the server."""
    try:
        async with scratch_database() as url:
            with tempfile.TemporaryDirectory(prefix="corral-bench-pg-") as tmp:
                await asyncio.to_thread(both_parts, Path(tmp), peer, url)
    except BaseException as error:  # scratch_database skips (a pytest outcome) when there is no server
        if type(error).__name__ != "Skipped":
            raise
        print(f"PostgreSQL: {error}", flush=True)


def main() -> None:
    peer = slurm("loop", str(JOBS), str(CLIENTS))
    with tempfile.TemporaryDirectory(prefix="corral-bench-") as tmp:
        for per_transaction in (1, MAX_BATCH):
            ceiling = asyncio.run(store_ceiling(Path(tmp), per_transaction))
            print(ratio_line(f"the store alone, {per_transaction} job(s) per commit", ceiling, peer), flush=True)
        both_parts(Path(tmp), peer)
    asyncio.run(on_postgres(peer))


if __name__ == "__main__":
    main()
