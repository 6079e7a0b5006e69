"""The units ScheduleJobs offers placement, made without the dataclass constructor, are the ones it would make."""

from __future__ import annotations

from dataclasses import astuple
from unittest.mock import patch

import pytest

from corral.core.constraints import parse_constraint
from corral.core.lifecycle import Target, TaskView
from corral.core.states import TaskState
from corral.engine.handlers import JobFacts, ScheduleJobs, Snapshot, pending_unit, unit_fields
from corral.scheduling.placement import Request, Unit, place_over
from corral.scheduling.snapshot import ClusterSnapshot, JobPlacement

REQUEST = Request(2.0, 2**30, 1)
JOB = JobPlacement(pool="gpu", project="physics", priority=100, constraints=(parse_constraint("zone=a"),),
                   spread=True, max_running=4, gang=True)


@pytest.mark.parametrize("failed_on", [{}, {11: frozenset({"w1"}), 13: frozenset({"w2", "w3"}), 12: frozenset({"w4"})}])
def test_a_pending_unit_is_the_unit_the_constructor_makes(failed_on):
    states = [TaskState.PENDING, TaskState.PENDING, TaskState.RUNNING, TaskState.PENDING]
    target = Target(7, True, "PENDING", 5.0, 0, tuple(TaskView(10 + i, i, state) for i, state in enumerate(states)))
    snapshot = Snapshot(9.0, {7: JobFacts(REQUEST, 0, None)}, ClusterSnapshot(jobs={7: JOB}, avoid=failed_on))
    made = pending_unit(target, unit_fields(JOB, REQUEST), snapshot, 6.0)
    expected = Unit((7, None), (10, 11, 13), REQUEST, pool="gpu", constraints=JOB.constraints, spread=True,
                    priority=100, project="physics", since=6.0,
                    avoid=frozenset(failed_on.get(11, ())) | failed_on.get(13, frozenset()), max_running=4)
    assert made == expected and hash(made) == hash(expected) and astuple(made) == astuple(expected)
    assert made.job_id == 7


def test_a_task_of_an_independent_job_is_a_unit_of_its_own():
    target = Target(8, False, "PENDING", 5.0, 0, (TaskView(21, 3, TaskState.PENDING),))
    made = pending_unit(target, unit_fields(JobPlacement(), REQUEST), Snapshot(9.0), 5.0)
    assert made == Unit((8, 21), (21,), REQUEST, since=5.0)


def test_a_one_task_target_whose_task_is_not_pending_offers_no_task():
    target = Target(8, False, "PENDING", 5.0, 0, (TaskView(21, 3, TaskState.ASSIGNED),))
    assert pending_unit(target, unit_fields(JobPlacement(), REQUEST), Snapshot(9.0), 5.0).task_ids == ()


def test_equal_requests_of_many_jobs_are_offered_as_one_object():
    """Placement tells a run of alike tasks by identity before it compares requests field by field."""
    targets = [Target(job, False, "PENDING", 5.0, 0, (TaskView(10 * job + i, i, TaskState.PENDING),))
               for job in (1, 2, 3) for i in range(2)]
    facts = {1: JobFacts(Request(2.0, 2**30, 1), 0, None), 2: JobFacts(Request(2.0, 2**30, 1), 0, None),
             3: JobFacts(Request(1.0, 2**30, 1), 0, None)}
    snapshot = Snapshot(9.0, facts, ClusterSnapshot(jobs={job: JobPlacement() for job in facts}))
    with patch("corral.engine.handlers.place_over", wraps=place_over) as placing:
        ScheduleJobs().execute(targets, snapshot)
    units = placing.call_args.args[0]
    assert [unit.key for unit in units] == [target.key for target in targets]
    assert units[0].request is units[1].request is units[2].request is units[3].request
    assert units[4].request is not units[0].request and units[4].request == Request(1.0, 2**30, 1)


def test_units_made_from_one_job_fields_are_each_their_own():
    """pending_unit makes each unit of its job's unit_fields by position: each is the unit the constructor makes, its
    fields in its own slots (a unit has no dictionary to share)."""
    shared = unit_fields(JOB, REQUEST)
    first, second = (pending_unit(Target(7, False, "PENDING", 5.0, 0, (TaskView(task, task, TaskState.PENDING),)),
                                  shared, Snapshot(9.0), since) for task, since in ((21, 5.0), (22, 6.0)))
    assert (first.key, first.task_ids, first.since) == ((7, 21), (21,), 5.0)
    assert (second.key, second.task_ids, second.since) == ((7, 22), (22,), 6.0)
    assert not hasattr(first, "__dict__") and shared == unit_fields(JOB, REQUEST)
    expected = Unit((7, 21), (21,), REQUEST, pool="gpu", constraints=JOB.constraints, spread=True, priority=100,
                    project="physics", since=5.0, max_running=4)
    assert type(first) is Unit and first == expected and astuple(first) == astuple(expected)
    assert repr(first) == repr(expected)
