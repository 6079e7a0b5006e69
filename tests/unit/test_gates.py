"""Which pending jobs may be placed at all (dependencies, begin times) and what a pool refuses outright."""

from __future__ import annotations

import pytest

from corral.core.config import PoolPolicy
from corral.scheduling.policy import over_pool_maximum
from corral.scheduling.reasons import DependencyFailed, NotBefore, WaitingForJobs
from corral.scheduling.snapshot import JobEnd, JobPlacement, eligible_since, gate

NOW = 1000.0


@pytest.mark.parametrize("ended", ["FAILED", "CANCELLED", "UNSCHEDULABLE", "LOST"])
def test_after_a_dependency_that_ended_otherwise_dooms_the_job(ended):
    job = JobPlacement(after=(1, 2))
    reason = gate(job, {1: JobEnd("SUCCEEDED", 10.0), 2: JobEnd(ended, 20.0)}, NOW)
    assert reason == DependencyFailed(2, ended)
    assert reason.sentence() == f"dependency job 2 ended {ended}; this job cannot run"


def test_after_waits_while_a_dependency_runs_and_names_its_state():
    reason = gate(JobPlacement(after=(1, 2)), {1: JobEnd("SUCCEEDED"), 2: JobEnd("RUNNING")}, NOW)
    assert reason == WaitingForJobs(((2, "RUNNING"),), any_outcome=False)
    assert reason.sentence() == "waiting for job 2 to succeed (now RUNNING)"


@pytest.mark.parametrize("ended", ["SUCCEEDED", "FAILED", "CANCELLED", "UNSCHEDULABLE", "LOST"])
def test_after_any_accepts_every_end(ended):
    assert gate(JobPlacement(after_any=(3,)), {3: JobEnd(ended)}, NOW) is None


def test_after_any_waits_for_every_job_to_end():
    reason = gate(JobPlacement(after_any=(3, 4)), {3: JobEnd("PENDING"), 4: JobEnd("RUNNING")}, NOW)
    assert reason.sentence() == "waiting for jobs 3, 4 to end (now PENDING, RUNNING)"


def test_begin_time():
    assert gate(JobPlacement(begin=NOW + 1), {}, NOW) == NotBefore(NOW + 1)
    assert NotBefore(0).sentence() == "not before 1970-01-01 00:00:00 UTC"
    assert gate(JobPlacement(begin=NOW), {}, NOW) is None


def test_the_timeout_clock_starts_when_the_job_may_start():
    deps = {1: JobEnd("SUCCEEDED", 500.0), 2: JobEnd("FAILED", 700.0)}
    assert eligible_since(JobPlacement(), deps, 100.0) == 100.0
    assert eligible_since(JobPlacement(after=(1,), after_any=(2,)), deps, 100.0) == 700.0
    assert eligible_since(JobPlacement(begin=900.0), deps, 100.0) == 900.0


@pytest.mark.parametrize(("total", "refused"), [
    ({"gpu": 16.0, "cpu": 100.0}, None),
    ({"gpu": 17.0}, "asks 17 gpu in total; the pool allows at most 16 per job"),
    ({"tpu": 5.0}, "asks 5 tpu in total; the pool allows at most 4 per job"),
])
def test_a_pool_maximum_refuses_only_what_it_names(total, refused):
    assert over_pool_maximum(PoolPolicy(max_per_job={"gpu": 16, "tpu": 4}), total) == refused


@pytest.mark.parametrize("job", [JobPlacement(), JobPlacement(after=(1,)), JobPlacement(after_any=(1,)),
                                 JobPlacement(begin=10.0), JobPlacement(begin=0.0)])
def test_a_job_not_gated_is_never_held_by_gate(job):
    """Callers skip `gate` for jobs whose `gated` is false: it must answer None for each of them, whatever is known."""
    if not job.gated:
        for dependencies in ({}, {1: JobEnd("FAILED", 5.0)}, {1: JobEnd("RUNNING")}):
            assert gate(job, dependencies, 0.0) is None
    else:
        assert gate(job, {1: JobEnd("RUNNING")}, 0.0) is not None
