"""The cancel cascade's decision (CancelLaunched), pure: which launched jobs are cancelled, and why."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from corral.core.lifecycle import Target, TaskView
from corral.core.states import JOB_TERMINAL, JobState, TaskState
from corral.engine.handlers import CancelLaunched, JobFacts, Launcher, Snapshot
from corral.scheduling.placement import Request

J = JobState


def run(launchers: dict[int, Launcher | None]):
    targets = [Target(job_id, True, "RUNNING", 0.0, 0, (TaskView(job_id * 10, 0, TaskState.RUNNING),))
               for job_id in launchers]
    snapshot = Snapshot(1.0, {job_id: JobFacts(Request(1, 0, 0), 0, None, launcher=launcher)
                              for job_id, launcher in launchers.items()})
    return CancelLaunched().execute(targets, snapshot).result


def test_children_of_a_failed_or_cancelled_launcher_are_cancelled_with_the_cause():
    result = run({
        2: Launcher(1, J.FAILED, False, J.FAILED),
        3: Launcher(1, J.TERMINATING, True, None),
        4: Launcher(1, J.SUCCEEDED, False, J.SUCCEEDED),
        5: Launcher(1, J.RUNNING, False, None),
    })
    assert result.successes == [(2, None), (3, None)]
    assert result.notes[(2, None)] == "cancelled: the job that launched it (job 1) ended FAILED"
    assert result.notes[(3, None)] == "cancelled: the job that launched it (job 1) was cancelled"
    assert not result.failures and not result.skipped  # the others are left alone, without history noise


def test_a_launcher_terminating_toward_a_failure_cascades_before_it_ends():
    result = run({2: Launcher(1, J.TERMINATING, False, J.FAILED), 3: Launcher(1, J.TERMINATING, False, J.SUCCEEDED)})
    assert result.successes == [(2, None)]
    assert result.notes[(2, None)] == "cancelled: the job that launched it (job 1) ended FAILED"


@given(st.sampled_from(list(JobState)), st.booleans(), st.sampled_from([None, *JOB_TERMINAL]))
def test_cascade_rule_matches_iris(state, cancelled, outcome):
    """Cancelled iff the launcher ended other than SUCCEEDED, or is terminating toward such an end."""
    launcher = Launcher(1, state, cancelled, outcome)
    expected = (state in JOB_TERMINAL and state is not J.SUCCEEDED) or (
        state is J.TERMINATING and (cancelled or outcome not in (None, J.SUCCEEDED)))
    assert launcher.ends_unsuccessfully() == expected
    assert (run({2: launcher}).successes == [(2, None)]) == expected
