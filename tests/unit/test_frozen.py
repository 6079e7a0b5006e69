"""The objects a pass makes per job, target or task, made without their frozen dataclasses' constructors, are the
objects the constructors make: equal, alike hashed, of the class, still frozen. Those made in bulk keep their fields
in slots."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from corral.core.frozen import maker
from corral.core.lifecycle import Outcome, SchedulingResult, Target, TaskView
from corral.core.states import TaskState
from corral.engine.coordinator import _targets
from corral.engine.effects import Place
from corral.engine.handlers import JobFacts, ScheduleJobs
from corral.scheduling.placement import Assignment, Unit
from corral.scheduling.rooms import Request
from corral.store.changes import TaskRow
from corral.store.reads import TASK_SLOTS, TargetJob

VIEW = TaskView(id=7, index=2, state=TaskState.PENDING, worker_id=None, failures=1, preemptions=0)
TARGET = Target(job_id=3, whole_job=False, state="PENDING", since=5.0, tries=0, tasks=(VIEW,), timeout=None)
EXAMPLES = [
    VIEW,
    TARGET,
    Unit(key=(3, 7), task_ids=(7,), request=Request(1.0, 0, 1.0), pool="default", constraints=(), spread=False,
         priority=100, project="p", since=5.0, avoid=frozenset({"w1"}), max_running=None),
    Assignment(task_id=7, worker_id="w1", gpu_ids=(0,)),
    JobFacts(Request(1.0, 0, 1.0), 0, 300.0, max_retries_failure=2, grace_period=2.0, preemption_epoch=3),
    Outcome(TARGET, SchedulingResult.SKIPPED, None, 0, "waiting for room"),
    Place(job_id=3, task_id=7, worker_id="w1", gpu_ids=(0,)),
]
# A task's view, target, unit and assignment, a job's facts, a target's outcome and a placed task's Place: their
# fields in slots (a Place's base, Effect, keeps no fields and no dictionary of its own).
SLOTTED = EXAMPLES


def test_task_targets_made_of_rows_by_position_are_each_their_own():
    """A run's per-task targets and their views, made by `maker` of rows read by position: each is the target the
    constructor makes, its fields in slots of its own."""
    job = TargetJob(job_id=3, job_state="PENDING", gang=False, job_tries=0, job_since=1.0, max_task_failures=0,
                    scheduling_timeout=None, pending_reason=None, outcome=None, cancelled=False, max_retries_failure=0,
                    max_retries_preemption=0, grace_period=15.0, preemption_epoch=0)
    other = job._replace(job_id=4)
    rows = [dict(job_id=job_id, id=task_id, index=index, state="PENDING", state_since=since, tries=tries, attempt=0,
                 worker_id=None, failures=0, preemptions=0, cpu=1.0, memory=0, gpu=1.0)
            for job_id, task_id, index, since, tries in ((3, 30, 0, 5.0, 0), (3, 31, 1, 6.0, 2), (4, 40, 0, 7.0, 1))]
    by_position = [tuple(row[name] for name in TASK_SLOTS) + (None, None) for row in rows]
    targets, jobs, task_rows = _targets([(job, by_position[:2]), (other, by_position[2:])], ScheduleJobs())
    assert targets == [Target(r["job_id"], False, "PENDING", r["state_since"], r["tries"],
                              (TaskView(r["id"], r["index"], TaskState.PENDING),)) for r in rows]
    assert all(type(target) is Target and type(target.tasks[0]) is TaskView for target in targets)
    assert len({id(target) for target in targets}) == 3 and not hasattr(targets[0], "__dict__")
    assert jobs[3].facts.request == Request(1.0, 0, 1.0) and jobs[3].facts.request is jobs[4].facts.request
    assert jobs[3].facts == JobFacts(Request(1.0, 0, 1.0), 0, None, max_retries_preemption=0)
    assert not hasattr(jobs[3].facts, "__dict__") and not hasattr(jobs[3], "__dict__")
    assert task_rows[40] == TaskRow(40, 4, 0, TaskState.PENDING, 0, None)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda example: type(example).__name__)
def test_maker_makes_what_the_constructor_makes(example):
    copy = maker(type(example))(*(getattr(example, field.name) for field in dataclasses.fields(example)))
    assert type(copy) is type(example)
    assert copy == example and hash(copy) == hash(example) and repr(copy) == repr(example)
    assert dataclasses.astuple(copy) == dataclasses.astuple(example)  # every field set
    with pytest.raises(dataclasses.FrozenInstanceError):
        copy.__setattr__(dataclasses.fields(example)[0].name, None)
    assert dataclasses.replace(copy) == example and pickle.loads(pickle.dumps(copy)) == example


def test_maker_refuses_a_class_with_a_post_init():
    with pytest.raises(TypeError, match="__post_init__"):
        maker(Request)


def test_maker_refuses_a_slotted_class_whose_base_sets_its_own_attributes():
    """The maker's plain class shares a slotted class's bases (Python changes the class only between classes adding
    the same slots to the same base): a base's own `__setattr__` (a frozen dataclass's) would be the plain class's."""

    @dataclasses.dataclass(frozen=True)
    class Frozen:
        pass

    @dataclasses.dataclass(frozen=True, slots=True)
    class Child(Frozen):
        value: int

    with pytest.raises(TypeError, match="__setattr__"):
        maker(Child)


@pytest.mark.parametrize("example", SLOTTED, ids=lambda example: type(example).__name__)
def test_what_a_pass_makes_per_task_keeps_its_fields_in_slots(example):
    """Some sixty thousand of them a pass over 10,000 pending tasks: no dictionary made, read or freed for each."""
    copy = maker(type(example))(*(getattr(example, field.name) for field in dataclasses.fields(example)))
    assert not hasattr(copy, "__dict__") and not hasattr(example, "__dict__")
