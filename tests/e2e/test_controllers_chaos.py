"""End to end: three controllers on one PostgreSQL database, one of them killed with SIGKILL every few seconds
and started again, while 500 jobs (single tasks, arrays, gangs, tasks on GPUs) run and a deployment answers
requests through a standalone router. Killing a controller must cost nothing:

- every job ends, and SUCCEEDED;
- no task ran more often than its attempts record (the tasks write a ledger of their runs);
- no worker's CPUs or GPUs were booked twice at any moment (checked over the ledger's time ranges);
- no controller logged an ERROR;
- the router answered every request (one retry on another try is allowed; a lost request is not).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.core.states import JOB_ACTIVE
from tests.e2e.cluster import free_port
from tests.e2e.controllers import Controllers, in_background, requests_through, router_answers
from tests.postgres import scratch_database
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e
SERVER = [sys.executable, str(Path(__file__).resolve().parents[1] / "serving_app" / "server.py")]
WORKERS = {"w0": (4, 2), "w1": (4, 2), "w2": (4, 0)}  # name -> (cpus, gpus)
KILL_EVERY = (2.0, 4.0)  # seconds between kills, drawn uniformly
DOWN_FOR = 1.0  # seconds a killed controller stays down before it is started again
BATCH = 100


def ledger_command(ledger: Path, seconds: float) -> list[str]:
    """A task that writes its start (with its GPUs) and its end to the ledger, with wall-clock times."""
    line = "$CORRAL_JOB_ID $CORRAL_TASK_INDEX $CORRAL_ATTEMPT"
    return ["sh", "-c", f'echo "start {line} ${{CUDA_VISIBLE_DEVICES:-}}- $(date +%s.%N)" >> {ledger}; '
                        f'sleep {seconds}; echo "end {line} - $(date +%s.%N)" >> {ledger}']


def workload(ledger: Path) -> list[dict]:
    """500 jobs: 420 single tasks (60 of them on a GPU), 40 arrays of 4, 40 two-node gangs."""
    jobs = []
    for i in range(420):
        on_gpu = i % 7 == 0
        jobs.append({"name": f"single{i}", "command": ledger_command(ledger, 0.1 + (i % 5) * 0.1),
                     "resources": {"cpu": 0.5, "gpu": 1 if on_gpu else 0}})
    for i in range(40):
        jobs.append({"name": f"array{i}", "command": ledger_command(ledger, 0.2), "replicas": 4,
                     "resources": {"cpu": 0.25}})
    for i in range(40):
        jobs.append({"name": f"gang{i}", "command": ledger_command(ledger, 0.3), "replicas": 2, "gang": True,
                     "spread": True, "resources": {"cpu": 1}})
    random.Random(17).shuffle(jobs)
    return jobs


@contextlib.contextmanager
def chaos(cluster: Controllers, rng: random.Random, kills: list[float]) -> Iterator[None]:
    """Kill a random live controller every few seconds and start it again after DOWN_FOR, until the block ends;
    then every controller runs again."""
    def run(done: threading.Event) -> None:
        while not done.wait(rng.uniform(*KILL_EVERY)):
            victim = rng.choice(cluster.live())
            cluster.kill_controller(victim)
            kills.append(time.time())
            done.wait(DOWN_FOR)
            cluster.spawn_controller(victim)

    try:
        with in_background(run):
            yield
    finally:
        for number in range(len(cluster.urls)):
            if number not in cluster.controllers:
                cluster.spawn_controller(number)


def submit_all(cluster: Controllers, jobs: list[dict]) -> list[int]:
    """In batches, each with idempotency keys, so a batch resent after its controller died is not doubled."""
    ids = []
    for start in range(0, len(jobs), BATCH):
        batch = jobs[start:start + BATCH]
        body = {"jobs": batch, "idempotency_keys": [f"chaos-{start + i}" for i in range(len(batch))]}

        def sent(body=body):
            response = cluster.request("POST", "/api/v1/jobs/batch", json=body)
            return response.status_code in (200, 201) and response.json()

        ids += [job["id"] for job in wait_for(sent, 60, "a batch of jobs to be accepted")]
    return ids


def runs_in(ledger: Path) -> tuple[dict, dict]:
    """(job, task, attempt) -> (start, end or None, gpu ids), and how many starts each had."""
    runs, starts = {}, Counter()
    for line in ledger.read_text().splitlines():
        kind, job, task, attempt, gpus, at = line.split()
        key = (int(job), int(task), int(attempt))
        if kind == "start":
            starts[key] += 1
            runs[key] = (float(at), None, [int(g) for g in gpus.rstrip("-").split(",") if g])
        else:
            begun, _, gpu_ids = runs[key]
            runs[key] = (begun, float(at), gpu_ids)
    return runs, starts


def overbooked(intervals: list[tuple[float, float, float, list[int]]], cpus: float) -> list[str]:
    """What was double-booked on one worker: (start, end, cpu, gpu ids) per run."""
    found = []
    events = sorted([(s, 1, cpu, gpus) for s, e, cpu, gpus in intervals]
                    + [(e, 0, cpu, gpus) for s, e, cpu, gpus in intervals])  # ends before starts at one instant
    used, held = 0.0, Counter()
    for at, starting, cpu, gpus in events:
        sign = 1 if starting else -1
        used += sign * cpu
        held.update({g: sign for g in gpus})
        if used > cpus + 1e-9:
            found.append(f"{used:g} cpus in use at {at}")
        found += [f"gpu {g} held {n} times at {at}" for g, n in held.items() if n > 1]
    return found


@pytest.mark.timeout(900)
async def test_killing_any_controller_costs_nothing(tmp_path):
    rng = random.Random(int(os.environ.get("CORRAL_CHAOS_SEED", "17")))
    ledger = tmp_path / "ledger"
    ledger.touch()
    async with scratch_database() as db_url:
        cluster = Controllers(tmp_path, db_url, 3)
        router = None
        try:
            cluster.start_all()
            for name, (cpus, gpus) in WORKERS.items():
                cluster.start_worker(name, cpus, *(["--gpus", str(gpus)] if gpus else []))
            response = cluster.request("POST", "/api/v1/deployments", json={
                "name": "svc", "command": SERVER, "min_replicas": 2, "resources": {"cpu": 0.25},
                "health": {"interval": 0.3, "threshold": 2, "timeout": 2}})
            assert response.status_code == 201, response.text
            wait_for(lambda: _healthy_replicas(cluster) >= 2, 90, "two healthy replicas")
            port = free_port()
            router = subprocess.Popen(
                [sys.executable, "-m", "corral", "router", "--controller", cluster.url, "--port", str(port)],
                env={**os.environ, "CORRAL_TOKEN": cluster.admin_token},
                stdout=(tmp_path / "router.log").open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
            router_url = f"http://127.0.0.1:{port}"
            wait_for(lambda: router_answers(router_url, cluster.admin_token), 60, "the router to route to svc")
            counts, kills = Counter(), []
            with requests_through(router_url, cluster.admin_token, counts), chaos(cluster, rng, kills):
                ids = submit_all(cluster, workload(ledger))
                wait_for(lambda: _all_ended(cluster, ids), 600, "every job to end")
            for number in range(3):
                wait_for(lambda n=number: cluster.healthy(n), 60, f"controller {number} back")
            jobs = {job["id"]: job for job in _jobs(cluster, ids)}
            assert {job["state"] for job in jobs.values()} == {"SUCCEEDED"}, Counter(j["state"] for j in jobs.values())
            assert len(kills) >= 3, f"only {len(kills)} kills: the chaos did not happen"

            runs, starts = runs_in(ledger)
            attempts = {}
            for job_id in jobs:
                for task in cluster.get(f"/api/v1/jobs/{job_id}/tasks"):
                    for attempt in task["attempts"]:
                        attempts[(job_id, task["index"], attempt["attempt"])] = attempt
            twice = {key: n for key, n in starts.items() if n > 1}
            assert not twice, f"attempts that ran more than once: {twice}"
            unrecorded = set(runs) - set(attempts)
            assert not unrecorded, f"runs no attempt records: {sorted(unrecorded)[:10]}"

            per_worker = defaultdict(list)
            for key, (begun, ended, gpus) in runs.items():
                attempt = attempts[key]
                spec = jobs[key[0]]["spec"]["resources"]
                per_worker[attempt["worker_id"]].append(
                    (begun, ended or attempt["finished_at"] or time.time(), spec["cpu"], gpus))
            cpus_of = {w["id"]: w["capacity"]["cpu"] for w in cluster.get("/api/v1/workers")}
            for worker_id, intervals in per_worker.items():
                assert not overbooked(intervals, cpus_of[worker_id]), (worker_id, overbooked(intervals,
                                                                                           cpus_of[worker_id])[:5])

            assert counts["answered"] > 0 and counts["lost"] == 0, counts
            for number in range(3):
                errors = [line for line in cluster.log(f"controller{number}").splitlines() if " ERROR " in line]
                assert not errors, f"controller {number} logged errors: {errors[:5]}"
            print(f"\nchaos: {len(kills)} kills, {len(ids)} jobs, {len(runs)} runs, router {dict(counts)}")
        finally:
            if router is not None:
                os.killpg(router.pid, signal.SIGTERM)
                router.wait(30)
            cluster.stop()


def _healthy_replicas(cluster: Controllers) -> int:
    return sum(r["state"] == "HEALTHY" for r in cluster.get("/api/v1/deployments/svc")["replica_list"])


def _jobs(cluster: Controllers, ids: list[int]) -> list[dict]:
    return [cluster.get(f"/api/v1/jobs/{job_id}") for job_id in ids]


def _all_ended(cluster: Controllers, ids: list[int]) -> bool:
    wanted = set(ids)
    active = cluster.get("/api/v1/jobs", limit=1000, state=sorted(JOB_ACTIVE))["items"]
    return not [job for job in active if job["id"] in wanted]
