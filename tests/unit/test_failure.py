"""classify_failure: each cause from what a job recorded, and the order in which they are checked."""

from __future__ import annotations

import pytest

from corral.core.failure import JobEnd, TaskEnd, classify_failure
from corral.core.retry_policy import FailureCause as C
from corral.core.states import JobState as J
from corral.core.states import TaskState as T


@pytest.mark.parametrize(("end", "cause"), [
    (JobEnd(J.CANCELLED, True, (TaskEnd(T.KILLED, T.RUNNING, 143),)), C.USER_CANCELLED),
    (JobEnd(J.FAILED, True, (TaskEnd(T.FAILED, T.RUNNING, 1),)), C.USER_CANCELLED),
    (JobEnd(J.UNSCHEDULABLE, False, (TaskEnd(T.UNSCHEDULABLE, T.PENDING),)), C.SCHEDULER_TIMEOUT),
    (JobEnd(J.FAILED, False, (TaskEnd(T.KILLED, T.TERMINATING),), expired=True), C.SCHEDULER_TIMEOUT),
    (JobEnd(J.FAILED, False, (TaskEnd(T.FAILED, T.RUNNING, 137, oom_killed=True),)), C.OOM_KILLED),
    (JobEnd(J.FAILED, False, (TaskEnd(T.FAILED, T.BUILDING),)), C.BUILD_FAILURE),
    (JobEnd(J.FAILED, False, (TaskEnd(T.FAILED, T.RUNNING, 3),)), C.NONZERO_EXIT),
    (JobEnd(J.FAILED, False, (TaskEnd(T.FAILED, T.STARTING, 127),)), C.NONZERO_EXIT),
    (JobEnd(J.LOST, False, (TaskEnd(T.WORKER_FAILED, T.RUNNING),)), C.AGENT_TRANSIENT),
    (JobEnd(J.FAILED, False, (TaskEnd(T.PREEMPTED, T.PREEMPTING), TaskEnd(T.KILLED, T.TERMINATING))),
     C.AGENT_TRANSIENT),
    (JobEnd(J.FAILED, False, (TaskEnd(T.KILLED, T.RUNNING, 143),)), C.UNKNOWN),  # a time limit
    (JobEnd(J.FAILED, False, ()), C.UNKNOWN),
])
def test_each_cause(end, cause):
    assert classify_failure(end) is cause


def test_the_most_specific_task_decides_a_job_whose_tasks_failed_differently():
    oom = TaskEnd(T.FAILED, T.RUNNING, 137, oom_killed=True)
    build = TaskEnd(T.FAILED, T.BUILDING)
    exit_1 = TaskEnd(T.FAILED, T.RUNNING, 1)
    lost = TaskEnd(T.WORKER_FAILED, T.RUNNING)
    assert classify_failure(JobEnd(J.FAILED, False, (lost, exit_1, build, oom))) is C.OOM_KILLED
    assert classify_failure(JobEnd(J.FAILED, False, (lost, exit_1, build))) is C.BUILD_FAILURE
    assert classify_failure(JobEnd(J.FAILED, False, (lost, exit_1))) is C.NONZERO_EXIT
