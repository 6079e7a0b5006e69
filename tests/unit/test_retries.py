"""RetryJobs' decisions, in the order its docstring gives them, and the chain's keys and words."""

from __future__ import annotations

import pytest

from corral.core.failure import JobEnd, TaskEnd
from corral.core.retries import (
    MAX_KEY_LENGTH,
    VERDICTS,
    RetryState,
    RetryTarget,
    Verdict,
    child_key,
    decide,
    retry_state_text,
)
from corral.core.retry_policy import FailureCause, RetryPolicy, effective_policy
from corral.core.states import JobState as J
from corral.core.states import TaskState as T

NOW = 1000.0
EXIT_1 = JobEnd(J.FAILED, False, (TaskEnd(T.FAILED, T.RUNNING, 1),))


def target(state=J.FAILED, retry_state=RetryState.ARMED, retry_count=0, end=EXIT_1, due_at=None, **policy):
    policy = effective_policy([RetryPolicy(**{"max_retries": 3, "retry_delay": 10, "jitter": "none", **policy})])
    return RetryTarget(job_id=5, state=state, retry_state=retry_state, retry_count=retry_count, policy=policy,
                       finished_at=NOW - 4, due_at=due_at, end=end)


def test_a_failure_with_retries_left_is_scheduled_after_the_delay_from_its_end():
    decision = decide(target(), NOW)
    assert (decision.verdict, decision.cause, decision.due_at) == (Verdict.SCHEDULED, FailureCause.NONZERO_EXIT,
                                                                   NOW - 4 + 10)
    assert decision.effect.retry_state is RetryState.SCHEDULED
    assert decision.message() == "attempt 1 of 4 ended FAILED (nonzero_exit); retry scheduled in 10.000s"


def test_the_delay_grows_with_the_retry_count():
    decision = decide(target(retry_count=2, backoff="exponential", backoff_multiplier=2), NOW)
    assert decision.due_at == NOW - 4 + 40


def test_a_failure_with_no_retry_left_is_exhausted():
    decision = decide(target(retry_count=3), NOW)
    assert (decision.verdict, decision.cause) == (Verdict.EXHAUSTED, FailureCause.NONZERO_EXIT)
    assert decision.message() == "attempt 4 of 4 ended FAILED (nonzero_exit); no retry left"


def test_a_cancelled_job_is_never_retried():
    end = JobEnd(J.CANCELLED, True, (TaskEnd(T.KILLED, T.TERMINATING),))
    decision = decide(target(state=J.CANCELLED, end=end), NOW)
    assert (decision.verdict, decision.cause) == (Verdict.NOT_RETRIED, FailureCause.USER_CANCELLED)


def test_a_cause_outside_the_eligible_ones_is_not_retried():
    decision = decide(target(eligible_causes=["oom_killed"]), NOW)
    assert (decision.verdict, decision.cause) == (Verdict.NOT_RETRIED, FailureCause.NONZERO_EXIT)


def test_a_never_retried_cause_wins_even_over_exhaustion():
    end = JobEnd(J.CANCELLED, True, ())
    assert decide(target(state=J.CANCELLED, end=end, retry_count=3), NOW).verdict is Verdict.NOT_RETRIED


def test_success_ends_the_chain():
    decision = decide(target(state=J.SUCCEEDED, end=JobEnd(J.SUCCEEDED, False), retry_count=2), NOW)
    assert (decision.verdict, decision.effect.retry_state) == (Verdict.DONE, RetryState.DONE)


def test_a_scheduled_retry_is_dispatched_once_due_and_not_before():
    assert decide(target(retry_state=RetryState.SCHEDULED, end=None, due_at=NOW + 0.001), NOW) is None
    decision = decide(target(retry_state=RetryState.SCHEDULED, end=None, due_at=NOW), NOW)
    assert (decision.verdict, decision.effect.retry_state) == (Verdict.DISPATCH, RetryState.RETRIED)


@pytest.mark.parametrize("retry_state", [RetryState.RETRIED, RetryState.EXHAUSTED, RetryState.NOT_RETRIED,
                                         RetryState.DONE])
def test_a_decided_job_is_left_alone(retry_state):
    assert decide(target(retry_state=retry_state), NOW) is None


def test_the_child_key_comes_from_the_chains_first_key_or_its_id():
    assert child_key("nightly-42", 7, 2) == "nightly-42:retry:2"
    assert child_key(None, 7, 1) == "job-7:retry:1"
    long = child_key("k" * 200, 7, 3)
    assert len(long) <= MAX_KEY_LENGTH and long.endswith(":retry:3")
    assert long == child_key("k" * 200, 8, 3) != child_key("k" * 199 + "j", 7, 3)


def test_retry_state_in_words():
    assert retry_state_text(None, 0, 0, None, None) is None
    assert retry_state_text(RetryState.ARMED, 1, 3, None, None) == "attempt 2 of 4"
    assert retry_state_text(RetryState.RETRIED, 1, 3, 5.0, 12) == "attempt 2 of 4; retried as job 12"
    assert retry_state_text(RetryState.SCHEDULED, 1, 3, 0.25, None) == \
        "retry scheduled at 1970-01-01T00:00:00.250+00:00"
    assert retry_state_text(RetryState.EXHAUSTED, 3, 3, None, None) == "exhausted"


def test_every_verdict_has_its_effect():
    assert set(VERDICTS) == set(Verdict)
