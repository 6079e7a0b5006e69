"""The units ScheduleJobs offers placement, made without the dataclass constructor, are the ones it would make."""

from __future__ import annotations

import pytest

from corral.core.constraints import parse_constraint
from corral.core.lifecycle import Target, TaskView
from corral.core.states import TaskState
from corral.engine.handlers import JobFacts, Snapshot, pending_unit
from corral.scheduling.placement import Request, Unit
from corral.scheduling.snapshot import ClusterSnapshot, JobPlacement

REQUEST = Request(2.0, 2**30, 1)
JOB = JobPlacement(pool="gpu", project="physics", priority=100, constraints=(parse_constraint("zone=a"),),
                   spread=True, max_running=4, gang=True)


@pytest.mark.parametrize("failed_on", [{}, {11: frozenset({"w1"}), 13: frozenset({"w2", "w3"}), 12: frozenset({"w4"})}])
def test_a_pending_unit_is_the_unit_the_constructor_makes(failed_on):
    states = [TaskState.PENDING, TaskState.PENDING, TaskState.RUNNING, TaskState.PENDING]
    target = Target(7, True, "PENDING", 5.0, 0, tuple(TaskView(10 + i, i, state) for i, state in enumerate(states)))
    snapshot = Snapshot(9.0, {7: JobFacts(REQUEST, 0, None)}, ClusterSnapshot(jobs={7: JOB}, avoid=failed_on))
    made = pending_unit(target, JOB, REQUEST, snapshot, 6.0)
    expected = Unit((7, None), (10, 11, 13), REQUEST, pool="gpu", constraints=JOB.constraints, spread=True,
                    priority=100, project="physics", since=6.0,
                    avoid=frozenset(failed_on.get(11, ())) | failed_on.get(13, frozenset()), max_running=4)
    assert made == expected and hash(made) == hash(expected) and vars(made) == vars(expected)
    assert made.job_id == 7


def test_a_task_of_an_independent_job_is_a_unit_of_its_own():
    target = Target(8, False, "PENDING", 5.0, 0, (TaskView(21, 3, TaskState.PENDING),))
    made = pending_unit(target, JobPlacement(), REQUEST, Snapshot(9.0), 5.0)
    assert made == Unit((8, 21), (21,), REQUEST, since=5.0)
