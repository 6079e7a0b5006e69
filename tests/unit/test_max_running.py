"""--max-running: at most K of a job's tasks hold room at once, whatever room there is (an array's `%K`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from corral.core.spec import JobSpec
from corral.scheduling.placement import Request, RunningTask, Unit, WorkerRoom, place
from corral.scheduling.reasons import AtMostRunning

JOB = 7


def big_room() -> WorkerRoom:
    return WorkerRoom("w", "w", 1000, 2**40, 0, 1000, 2**40, [])


def capped(task: int, limit: int | None, job: int = JOB) -> Unit:
    return Unit((job, task), (task,), Request(1, 0, 0), max_running=limit)


def holding(task: int, job: int = JOB) -> RunningTask:
    return RunningTask(task, job, "w", Request(1, 0, 0), (), 0)


@given(pending=st.integers(0, 40), limit=st.integers(1, 20), already=st.integers(0, 25))
def test_places_no_more_than_the_cap_less_those_holding_room(pending, limit, already):
    running = [holding(1000 + i) for i in range(already)]
    result = place([capped(i, limit) for i in range(pending)], [big_room()], running=running)
    assert len(result.assignments) == min(pending, max(0, limit - already))
    for reason in result.waiting.values():
        assert isinstance(reason, AtMostRunning)
        assert reason.limit == limit and reason.holding == max(limit, already)


def test_the_waiting_task_says_why():
    result = place([capped(i, 3) for i in range(5)], [big_room()])
    assert len(result.assignments) == 3
    assert {r.sentence() for r in result.waiting.values()} == {
        "3 of its tasks run, at most 3 at once (--max-running)"}


def test_the_cap_is_per_job_and_other_jobs_go_on():
    units = [capped(i, 1) for i in range(3)] + [capped(10 + i, None, job=8) for i in range(3)]
    result = place(units, [big_room()], running=[holding(99, job=8)])
    assert sorted(key for key in result.assignments) == [(JOB, 0), (8, 10), (8, 11), (8, 12)]


def test_other_jobs_tasks_do_not_count():
    result = place([capped(i, 2) for i in range(4)], [big_room()], running=[holding(50, job=9)] * 5)
    assert len(result.assignments) == 2


@pytest.mark.parametrize("spec", [
    {"command": ["true"], "max_running": 0},
    {"command": ["true"], "max_running": -1},
    {"command": ["true"], "max_running": "two"},
    {"command": ["true"], "replicas": 4, "gang": True, "max_running": 2},
])
def test_a_meaningless_cap_is_refused(spec):
    with pytest.raises(ValidationError):
        JobSpec.model_validate(spec)


def test_a_cap_above_the_replicas_is_accepted():
    assert JobSpec(command=["true"], replicas=2, max_running=5).max_running == 5
