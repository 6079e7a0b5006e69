"""`make bench`: the dashboard's jobs page with 100,000 jobs in the store.

Fills a fresh SQLite store with jobs in a realistic mix of states (each with its task and
history rows), starts a real controller on it, then measures
  1. the API page the jobs table reads (50 jobs and the total), in the orders and filters it offers;
  2. time to first render of the jobs page in headless Chromium: from navigation start to the
     first row of the table in the page (target: under 1 s), noted by the page itself.
"""

from __future__ import annotations

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
from corral.store.schema import history, jobs, tasks  # noqa: E402
from corral.store.store import Store  # noqa: E402
from tests.e2e.browser import ARTIFACTS, chromium_path  # noqa: E402
from tests.e2e.cluster import Cluster  # noqa: E402
from tests.waiting import wait_for  # noqa: E402

JOBS = 100_000
CHUNK = 5_000
# Workloads: (job state, task state, share). Waiting jobs cost the scheduler a pass each second
# on the controller's event loop, which the API shares, so the figure is taken with and without them.
MIXES = {
    "history of finished work": [("SUCCEEDED", "SUCCEEDED", 0.80), ("FAILED", "FAILED", 0.10),
                                 ("CANCELLED", "KILLED", 0.05), ("RUNNING", "RUNNING", 0.05)],
    "with 10,000 jobs waiting": [("SUCCEEDED", "SUCCEEDED", 0.70), ("FAILED", "FAILED", 0.10),
                                 ("CANCELLED", "KILLED", 0.05), ("PENDING", "PENDING", 0.10),
                                 ("RUNNING", "RUNNING", 0.05)],
}
API_PAGES = {
    "newest first": {},
    "sorted by name": {"sort": "name", "order": "asc"},
    "state filter": {"state": "FAILED"},
    "name search": {"name": "train-7"},
    "page 1000": {"offset": 50_000},
}
# Notes, in the page itself, when the first job row is on screen (ms since navigation start), so
# the figure does not include the test driver's own round trips.
FIRST_ROW = """
new MutationObserver((_, observer) => {
  if (document.querySelector("tr[data-job]")) { window.firstRowAt = performance.now(); observer.disconnect(); }
}).observe(document, {childList: true, subtree: true});
"""
SAMPLES = 15
RENDERS = 7


async def fill(path: Path, count: int, mix: list) -> None:
    store = await Store.open(sqlite_url(path))
    rng = random.Random(6)
    states = rng.choices([(j, t) for j, t, _ in mix], weights=[w for *_, w in mix], k=count)
    start = time.time() - 30 * 86400
    try:
        for first in range(0, count, CHUNK):
            job_rows, task_rows, history_rows = [], [], []
            for i in range(first, min(first + CHUNK, count)):
                job_state, task_state = states[i]
                name = f"{rng.choice(['train', 'eval', 'sweep', 'etl'])}-{i}"
                at = start + i * 25.0
                job_rows.append(dict(
                    id=i + 1, name=name, spec=JobSpec(name=name, command=["python", "run.py"]).model_dump(mode="json"),
                    state=job_state, gang=False, priority=rng.randint(0, 3), replicas=1, max_task_failures=0,
                    max_retries_failure=0, max_retries_preemption=100, cancelled=job_state == "CANCELLED", tries=0,
                    created_at=at, state_since=at + 5, pending_reason="needs cpu 64 per task; no alive worker is "
                    "that large (waiting for one to join)" if job_state == "PENDING" else None,
                    finished_at=at + 60 if job_state in ("SUCCEEDED", "FAILED", "CANCELLED") else None))
                task_rows.append(dict(job_id=i + 1, index=0, state=task_state, state_since=at + 5, attempt=0, tries=0,
                                      failures=0, preemptions=0, gpu_ids=[], cpu=1.0, memory=0, gpu=0))
                history_rows.append(dict(at=at, job_id=i + 1, handler="Submit", result="SUCCESS", to_state="PENDING",
                                         message="1 task(s)", task_id=None, attempt=None, from_state=None,
                                         worker_id=None))
            async with store.write() as connection:
                await connection.execute(insert(jobs), job_rows)
                await connection.execute(insert(tasks), task_rows)
                await connection.execute(insert(history), history_rows)
    finally:
        await store.close()


def api_latencies(cluster: Cluster) -> None:
    print(f"  API page of 50 jobs with the total ({SAMPLES} samples each): median / p95")
    for label, params in API_PAGES.items():
        seconds = []
        for _ in range(SAMPLES):
            began = time.perf_counter()
            response = cluster.http.get("/api/v1/jobs", params={"limit": 50, "count": "true", **params})
            seconds.append(time.perf_counter() - began)
            assert response.status_code == 200, response.text
        total = response.json()["total"]
        seconds.sort()
        print(f"    {label:<16} {statistics.median(seconds) * 1000:7.1f} ms / "
              f"{seconds[int(len(seconds) * 0.95) - 1] * 1000:7.1f} ms   ({total:,} match)")


def first_render(cluster: Cluster, shot: bool) -> list[float] | None:
    executable = chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        executable = None
    if executable is None:
        print("  time to first render: skipped (no chromium or no playwright)")
        return None
    renders = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        for attempt in range(RENDERS + 1):  # the first load warms the browser up and is not counted
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            context.add_init_script(f"sessionStorage.setItem('corral-token', {cluster.admin_token!r});" + FIRST_ROW)
            page = context.new_page()
            page.goto(f"{cluster.url}/#/jobs")
            page.wait_for_function("window.firstRowAt !== undefined")
            if attempt:
                renders.append(page.evaluate("window.firstRowAt") / 1000)
            if attempt == 0 and shot:
                ARTIFACTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(ARTIFACTS / "jobs-100k.png"))
            context.close()
        browser.close()
    return renders


def scheduled(cluster: Cluster) -> bool:
    """True once the first waiting job (if any) has been judged by the scheduler."""
    waiting = cluster.get("/api/v1/queue", limit=1)["items"]
    return not waiting or bool(waiting[0]["job"]["pending_reason"])


def main() -> None:
    for label, mix in MIXES.items():
        with tempfile.TemporaryDirectory(prefix="corral-bench-dashboard-") as tmp:
            cluster = Cluster(Path(tmp))
            cluster.data_dir.mkdir(parents=True)
            began = time.perf_counter()
            asyncio.run(fill(cluster.data_dir / "corral.db", JOBS, mix))
            print(f"jobs page with {JOBS:,} jobs in the store, {label} (filled in {time.perf_counter() - began:.0f}s)")
            cluster.start_controller()
            try:
                # The steady state: after the scheduler's first pass over any waiting jobs has been written.
                wait_for(lambda c=cluster: scheduled(c), 120, "the first scheduling pass")
                api_latencies(cluster)
                renders = first_render(cluster, shot=label == next(iter(MIXES)))
                if renders:
                    print(f"  time to first render of the jobs page: median {statistics.median(renders):.3f} s, "
                          f"worst {max(renders):.3f} s over {len(renders)} loads (target < 1 s)")
            finally:
                cluster.stop(strict=False)  # a slow stop is said, the figures still printed


if __name__ == "__main__":
    main()
