"""The objects a pass makes per row or per task, made without their frozen dataclasses' constructors, are the objects
the constructors make: equal, alike hashed, of the class, still frozen."""

from __future__ import annotations

import dataclasses

import pytest

from corral.core.frozen import made
from corral.core.lifecycle import Target, TaskView
from corral.core.states import TaskState
from corral.engine.effects import Place
from corral.scheduling.placement import Assignment, Unit
from corral.scheduling.preemption import RunningTask
from corral.scheduling.rooms import Request

VIEW = TaskView(id=7, index=2, state=TaskState.PENDING, worker_id=None, failures=1, preemptions=0)
EXAMPLES = [
    VIEW,
    Target(job_id=3, whole_job=False, state="PENDING", since=5.0, tries=0, tasks=(VIEW,), timeout=None),
    Unit(key=(3, 7), task_ids=(7,), request=Request(1.0, 0, 1.0), pool="default", constraints=(), spread=False,
         priority=100, project="p", since=5.0, avoid=frozenset({"w1"}), max_running=None),
    Assignment(task_id=7, worker_id="w1", gpu_ids=(0,)),
    Place(job_id=3, task_id=7, worker_id="w1", gpu_ids=(0,)),
    RunningTask(task_id=7, job_id=3, worker_id="w1", request=Request(1.0, 0, 1.0), gpu_ids=(0,), priority=0,
                project="p", since=1.0, gang=False, stopping=False),
]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda example: type(example).__name__)
def test_made_is_what_the_constructor_makes(example):
    copy = made(type(example), **{field.name: getattr(example, field.name) for field in dataclasses.fields(example)})
    assert type(copy) is type(example)
    assert copy == example and hash(copy) == hash(example)
    assert vars(copy) == vars(example)
    with pytest.raises(dataclasses.FrozenInstanceError):
        copy.__setattr__(dataclasses.fields(example)[0].name, None)
