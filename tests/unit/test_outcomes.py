"""How a job's state follows from its tasks, and the two retry budgets (DESIGN.md, Task and Job states)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.core.outcomes import (
    Budget,
    RetryDecision,
    after_attempt,
    derived_job_state,
    final_state,
    independent_job_state,
    job_outcome,
)
from corral.core.states import JOB_TERMINAL, TASK_TERMINAL, JobState, TaskState

J, T = JobState, TaskState
S, F, K, WF, PD, U = T.SUCCEEDED, T.FAILED, T.KILLED, T.WORKER_FAILED, T.PREEMPTED, T.UNSCHEDULABLE
R, P = T.RUNNING, T.PENDING


# --- job_outcome, independent tasks --------------------------------------------------------------


@pytest.mark.parametrize(("states", "max_failures", "expected"), [
    # More than max_task_failures FAILED beats UNSCHEDULABLE.
    ([F, U, R], 0, J.FAILED),
    ([F, F, U], 1, J.FAILED),
    ([K, U], 0, J.FAILED),  # KILLED by a time limit counts as a failure
    # Within the failure budget, any UNSCHEDULABLE decides, even with others still running.
    ([F, U, R], 1, J.UNSCHEDULABLE),
    ([U, R, R], 0, J.UNSCHEDULABLE),
    ([U, S], 0, J.UNSCHEDULABLE),
    # All terminal with a lost one -> LOST.
    ([S, WF], 0, J.LOST),
    ([S, PD, S], 0, J.LOST),
    ([F, WF, S], 1, J.LOST),
    # All succeeded.
    ([S], 0, J.SUCCEEDED),
    ([S, S, S], 0, J.SUCCEEDED),
    # Failures within max_task_failures and the rest succeeded.
    ([F, S, S], 1, J.SUCCEEDED),
    ([F, F, S], 2, J.SUCCEEDED),
    # Undecided.
    ([R, S], 0, None),
    ([P], 0, None),
    ([F, R], 1, None),
    ([WF, R], 0, None),
    ([T.TERMINATING, S], 0, None),
])
def test_independent_job_outcome(states, max_failures, expected):
    assert job_outcome(states, gang=False, max_task_failures=max_failures) is expected


def test_independent_failure_threshold_is_strictly_more_than():
    assert job_outcome([F, F, R, R], gang=False, max_task_failures=2) is None
    assert job_outcome([F, F, F, R], gang=False, max_task_failures=2) is J.FAILED


# --- job_outcome, gangs --------------------------------------------------------------------------


@pytest.mark.parametrize(("states", "expected"), [
    ([F, R], J.FAILED),
    ([K, R], J.FAILED),
    ([S, F], J.FAILED),
    ([WF, R], J.LOST),
    ([PD, R, R], J.LOST),
    ([F, WF], J.FAILED),  # a failure decides before a loss
    ([U, P], J.UNSCHEDULABLE),
    ([S, S], J.SUCCEEDED),
    ([S, R], None),  # ranks end at slightly different times
    ([R, R], None),
    ([P, P], None),
])
def test_gang_job_outcome(states, expected):
    assert job_outcome(states, gang=True, max_task_failures=0) is expected


def test_gang_ignores_max_task_failures():
    assert job_outcome([F, S, S], gang=True, max_task_failures=2) is J.FAILED


def test_job_outcome_accepts_a_generator():
    assert job_outcome((s for s in [S, S]), gang=False, max_task_failures=0) is J.SUCCEEDED


# --- independent_job_state -----------------------------------------------------------------------


@pytest.mark.parametrize(("states", "max_failures", "expected"), [
    ([P, P], 0, J.PENDING),
    ([P, T.ASSIGNED], 0, J.RUNNING),
    ([P, S], 0, J.RUNNING),
    ([R, R], 0, J.RUNNING),
    ([T.BUILDING], 0, J.RUNNING),
    ([F, R], 1, J.RUNNING),
    ([F, R], 0, J.TERMINATING),  # decided, a task still runs
    ([U, R], 0, J.TERMINATING),
    ([S, S], 0, J.SUCCEEDED),
    ([F, K], 0, J.FAILED),
    ([F, S], 1, J.SUCCEEDED),
    ([S, U], 0, J.UNSCHEDULABLE),
    ([S, WF], 0, J.LOST),
])
def test_independent_job_state(states, max_failures, expected):
    assert independent_job_state(states, max_task_failures=max_failures) is expected


# --- final_state ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("outcome", "cancelled", "expected"), [
    (None, True, J.CANCELLED),
    (J.SUCCEEDED, True, J.CANCELLED),
    (J.FAILED, False, J.FAILED),
    (J.LOST, False, J.LOST),
    (J.UNSCHEDULABLE, False, J.UNSCHEDULABLE),
    (J.SUCCEEDED, False, J.SUCCEEDED),
    (None, False, J.FAILED),  # terminated with no verdict: a failure
    (J.RUNNING, False, J.FAILED),
])
def test_final_state(outcome, cancelled, expected):
    assert final_state(outcome, cancelled) is expected


# --- derived_job_state ---------------------------------------------------------------------------


def test_derived_keeps_an_existing_outcome_when_siblings_end_killed():
    # UNSCHEDULABLE decided it; the sibling that was running is then KILLED. Re-reading the tasks
    # alone would say FAILED (one KILLED > max_task_failures=0); the recorded outcome must stand.
    assert job_outcome([S, U, K], gang=False, max_task_failures=0) is J.FAILED
    state, outcome = derived_job_state([S, U, K], gang=False, max_task_failures=0,
                                       outcome=J.UNSCHEDULABLE, cancelled=False)
    assert (state, outcome) == (J.UNSCHEDULABLE, J.UNSCHEDULABLE)


def test_derived_gang_keeps_its_loss_when_siblings_are_killed():
    state, outcome = derived_job_state([WF, K, K], gang=True, max_task_failures=0, outcome=J.LOST, cancelled=False)
    assert (state, outcome) == (J.LOST, J.LOST)


def test_derived_waits_for_tasks_to_stop():
    assert derived_job_state([F, T.TERMINATING], gang=False, max_task_failures=0,
                             outcome=J.FAILED, cancelled=False) == (J.TERMINATING, J.FAILED)
    assert derived_job_state([F, K], gang=False, max_task_failures=0,
                             outcome=J.FAILED, cancelled=False) == (J.FAILED, J.FAILED)


def test_derived_cancelled_is_terminating_then_cancelled():
    assert derived_job_state([R, P], gang=False, max_task_failures=0,
                             outcome=None, cancelled=True) == (J.TERMINATING, None)
    assert derived_job_state([K, K], gang=False, max_task_failures=0,
                             outcome=None, cancelled=True) == (J.CANCELLED, None)
    # A cancel wins over an outcome that was being waited for, and the outcome is kept as the cause.
    assert derived_job_state([S, K], gang=True, max_task_failures=0,
                             outcome=J.FAILED, cancelled=True) == (J.CANCELLED, J.FAILED)


@pytest.mark.parametrize(("states", "expected"), [
    ([P, P], (J.PENDING, None)),
    ([R, S], (J.RUNNING, None)),
    ([S, S], (J.SUCCEEDED, J.SUCCEEDED)),
    ([F, R], (J.TERMINATING, J.FAILED)),
    ([S, WF], (J.LOST, J.LOST)),
])
def test_derived_independent_without_outcome(states, expected):
    assert derived_job_state(states, gang=False, max_task_failures=0, outcome=None, cancelled=False) == expected


@pytest.mark.parametrize(("states", "expected"), [
    ([F, R], (J.TERMINATING, J.FAILED)),
    ([K, K], (J.FAILED, J.FAILED)),
    ([S, S], (J.SUCCEEDED, J.SUCCEEDED)),
    ([R, T.TERMINATING], (J.TERMINATING, None)),
    ([K, S], (J.FAILED, J.FAILED)),
])
def test_derived_terminating_gang_without_outcome(states, expected):
    assert derived_job_state(states, gang=True, max_task_failures=0, outcome=None, cancelled=False) == expected


def test_derived_final_state_is_terminal_once_all_tasks_are():
    for ends in ([S], [F], [K], [WF], [PD], [U], [S, F, K]):
        for gang in (False, True):
            for cancelled in (False, True):
                state, _ = derived_job_state(ends, gang=gang, max_task_failures=0, outcome=None, cancelled=cancelled)
                assert state in JOB_TERMINAL, (ends, gang, cancelled)


# --- after_attempt -------------------------------------------------------------------------------


def budget(mf=0, mp=100, f=0, p=0) -> Budget:
    return Budget(max_retries_failure=mf, max_retries_preemption=mp, failures=f, preemptions=p)


@pytest.mark.parametrize(("b", "expected"), [
    (budget(mf=0), RetryDecision(False, 1, 0)),
    (budget(mf=1), RetryDecision(True, 1, 0)),
    (budget(mf=2, f=1, p=3), RetryDecision(True, 2, 3)),
    (budget(mf=2, f=2), RetryDecision(False, 3, 0)),
])
def test_failed_charges_the_failure_budget(b, expected):
    assert after_attempt(F, b) == expected


@pytest.mark.parametrize("ended", [WF, PD])
@pytest.mark.parametrize(("b", "expected"), [
    (budget(mp=0), RetryDecision(False, 0, 1)),
    (budget(mp=1), RetryDecision(True, 0, 1)),
    (budget(mp=100, f=5, p=99), RetryDecision(True, 5, 100)),
    (budget(mp=100, p=100), RetryDecision(False, 0, 101)),
])
def test_loss_charges_the_preemption_budget(ended, b, expected):
    assert after_attempt(ended, b) == expected


@pytest.mark.parametrize("ended", [WF, PD])
def test_never_ran_loss_is_free(ended):
    assert after_attempt(ended, budget(mp=0, p=0), ever_ran=False) == RetryDecision(True, 0, 0)
    assert after_attempt(ended, budget(mp=3, f=1, p=3), ever_ran=False) == RetryDecision(True, 1, 3)


@pytest.mark.parametrize("ended", [S, K, U])
def test_success_kill_and_unschedulable_never_retry(ended):
    assert after_attempt(ended, budget(mf=10, mp=10, f=1, p=2)) == RetryDecision(False, 1, 2)
    assert after_attempt(ended, budget(mf=10, mp=10), ever_ran=False) == RetryDecision(False, 0, 0)


def test_failed_is_charged_even_if_it_never_ran():
    # A build failure happens before the process runs; it still counts against max_retries_failure.
    assert after_attempt(F, budget(mf=0), ever_ran=False) == RetryDecision(False, 1, 0)


def test_defaults_give_no_failure_retry_and_many_preemption_retries():
    # DESIGN: max_retries_failure defaults to 0, max_retries_preemption to 100.
    from corral.core.spec import JobSpec

    spec = JobSpec(command=["true"])
    assert (spec.max_retries_failure, spec.max_retries_preemption) == (0, 100)


# --- properties: attempts under a budget -------------------------------------------------------------


def attempts_until_done(ended: TaskState, b: Budget, *, ever_ran: bool = True, cap: int = 10_000) -> int:
    attempts = 0
    while attempts < cap:
        attempts += 1
        decision = after_attempt(ended, b, ever_ran=ever_ran)
        b = Budget(b.max_retries_failure, b.max_retries_preemption, decision.failures, decision.preemptions)
        if not decision.retry:
            return attempts
    return attempts


@given(k=st.integers(0, 50), mp=st.integers(0, 50))
def test_failing_every_attempt_runs_k_plus_one_attempts(k, mp):
    assert attempts_until_done(F, budget(mf=k, mp=mp)) == k + 1


@given(k=st.integers(0, 200), mf=st.integers(0, 50), ended=st.sampled_from([WF, PD]))
def test_losing_every_attempt_runs_k_plus_one_attempts(k, mf, ended):
    assert attempts_until_done(ended, budget(mf=mf, mp=k)) == k + 1


@given(k=st.integers(0, 5))
def test_never_ran_losses_never_exhaust_the_budget(k):
    assert attempts_until_done(WF, budget(mp=k), ever_ran=False, cap=50) == 50


@given(st.lists(st.sampled_from([F, WF, PD]), max_size=30), st.integers(0, 10), st.integers(0, 10))
def test_budgets_are_counted_apart(ends, mf, mp):
    b = budget(mf=mf, mp=mp)
    for ended in ends:
        decision = after_attempt(ended, b)
        b = Budget(mf, mp, decision.failures, decision.preemptions)
        assert decision.retry is (b.failures <= mf if ended is F else b.preemptions <= mp)
    assert b.failures == ends.count(F)
    assert b.preemptions == len(ends) - ends.count(F)


@given(st.lists(st.sampled_from(sorted(TASK_TERMINAL | {R, P})), min_size=1, max_size=8), st.booleans())
def test_outcome_of_all_terminal_tasks_is_always_decided(states, gang):
    outcome = job_outcome(states, gang=gang, max_task_failures=0)
    if all(s in TASK_TERMINAL for s in states):
        assert outcome in JOB_TERMINAL
    if outcome is not None:
        assert outcome in JOB_TERMINAL and outcome is not J.CANCELLED
