"""`make bench`: `corral usage` over 1,000,000 attempts, on SQLite and on PostgreSQL.

Fills a fresh store with 100,000 jobs (20 projects, 20 users, 3 pools, 2 tasks each, 5 attempts per task: a
million attempts spread over the last 60 days, a few still running), starts a real controller on it, and times
the API call `corral usage` makes (GET /api/v1/usage, the last 30 days) by project, user and pool, and the
dashboard's daily series. PostgreSQL is the server on 127.0.0.1:5432 (CORRAL_TEST_POSTGRES); without it, that
half is skipped, saying why.

    python bench/usage.py [--attempts N]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import insert  # noqa: E402

from corral.core.spec import JobSpec  # noqa: E402
from corral.store.database import sqlite_url  # noqa: E402
from corral.store.schema import attempts, jobs, tasks  # noqa: E402
from corral.store.store import Store  # noqa: E402
from tests.e2e.cluster import Cluster  # noqa: E402
from tests.postgres import POSTGRES_URL, scratch_database  # noqa: E402

TASKS_PER_JOB = 2
ATTEMPTS_PER_TASK = 5
CHUNK_JOBS = 2_000
SAMPLES = 5
CALLS = {"usage by project": ("/api/v1/usage", {"by": "project"}),
         "usage by user": ("/api/v1/usage", {"by": "user"}),
         "usage by pool": ("/api/v1/usage", {"by": "pool"}),
         "daily series by project": ("/api/v1/usage/series", {"by": "project", "bucket": "day"})}


async def fill(url: str, attempt_count: int) -> None:
    """Jobs, tasks and attempts written in bulk, as the engine would have left them."""
    store = await Store.open(url)
    rng = random.Random(21)
    job_count = attempt_count // (TASKS_PER_JOB * ATTEMPTS_PER_TASK)
    now = time.time()
    start = now - 60 * 86400
    specs = {(p, pool): JobSpec(name="bench", command=["python", "train.py"], project=f"project-{p}",
                                pool=pool).model_dump(mode="json")
             for p in range(20) for pool in ("default", "a100", "cpu")}
    try:
        for first in range(0, job_count, CHUNK_JOBS):
            job_rows, task_rows, attempt_rows = [], [], []
            for job_id in range(first + 1, min(first + CHUNK_JOBS, job_count) + 1):
                at = start + (job_id / job_count) * 60 * 86400
                job_rows.append(dict(
                    id=job_id, name="bench", spec=specs[(rng.randrange(20), rng.choice(("default", "a100", "cpu")))],
                    state="SUCCEEDED", gang=False, priority=0, replicas=TASKS_PER_JOB, max_task_failures=0,
                    max_retries_failure=0, max_retries_preemption=100, cancelled=False, tries=1, created_at=at,
                    state_since=at, finished_at=at, owner=f"user-{rng.randrange(20)}"))
                for index in range(TASKS_PER_JOB):
                    task_id = (job_id - 1) * TASKS_PER_JOB + index + 1
                    task_rows.append(dict(id=task_id, job_id=job_id, index=index, state="SUCCEEDED", state_since=at,
                                          attempt=ATTEMPTS_PER_TASK, tries=ATTEMPTS_PER_TASK, failures=0,
                                          preemptions=ATTEMPTS_PER_TASK - 1, gpu_ids=[], cpu=rng.choice((1, 4, 16)),
                                          memory=rng.choice((2, 16, 64)) * 2**30, gpu=rng.choice((0, 0.25, 1, 8))))
                    began = at
                    for n in range(1, ATTEMPTS_PER_TASK + 1):
                        ended = began + rng.uniform(60, 7200)
                        running = ended > now
                        attempt_rows.append(dict(task_id=task_id, attempt=n, worker_id="w", state="RUNNING"
                                                 if running else "PREEMPTED", assigned_at=began, started_at=began,
                                                 finished_at=None if running else ended))
                        began = ended + 30
            async with store.write() as connection:
                await connection.execute(insert(jobs), job_rows)
                await connection.execute(insert(tasks), task_rows)
                await connection.execute(insert(attempts), attempt_rows)
    finally:
        await store.close()


def timings(cluster: Cluster) -> None:
    for label, (path, params) in CALLS.items():
        seconds = []
        for _ in range(SAMPLES):
            began = time.perf_counter()
            response = cluster.http.get(path, params={"since": "30d", **params}, timeout=600)
            seconds.append(time.perf_counter() - began)
            assert response.status_code == 200, response.text
        rows = len(response.json()["rows"])
        print(f"  {label:<24} median {statistics.median(seconds):6.2f} s, worst {max(seconds):6.2f} s "
              f"({rows} rows, {SAMPLES} calls)")


def measure(label: str, root: Path, url: str | None, attempt_count: int) -> None:
    cluster = Cluster(root, db_url=url)
    cluster.data_dir.mkdir(parents=True)
    began = time.perf_counter()
    asyncio.run(fill(url or sqlite_url(cluster.data_dir / "corral.db"), attempt_count))
    print(f"{label}: `corral usage` over {attempt_count:,} attempts, the last 30 days of 60 "
          f"(filled in {time.perf_counter() - began:.0f} s)")
    cluster.start_controller()
    try:
        timings(cluster)
    finally:
        cluster.stop(strict=False)  # a slow stop is said, the figures still printed


async def postgres_measure(root: Path, attempt_count: int) -> None:
    try:
        async with scratch_database() as url:
            await asyncio.to_thread(measure, "PostgreSQL", root, url, attempt_count)
    except BaseException as error:  # tests.postgres skips (an exception pytest knows) where there is no server
        if type(error).__name__ != "Skipped":
            raise
        print(f"PostgreSQL: skipped, no server at {POSTGRES_URL}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="corral-bench-usage-") as tmp:
        measure("SQLite", Path(tmp) / "sqlite", None, args.attempts)
        asyncio.run(postgres_measure(Path(tmp) / "postgres", args.attempts))


if __name__ == "__main__":
    main()
