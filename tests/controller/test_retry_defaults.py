"""A new job's retry columns: the whole policy merged only for a job that is to be retried."""

from __future__ import annotations

import pytest

from corral.controller import retry_defaults
from corral.controller.retry_defaults import retry_columns
from corral.core.retries import RetryState
from corral.core.retry_policy import RetryPolicy
from corral.core.spec import JobSpec

NOT_RETRIED = [
    (None, [None, None, None]),
    (None, [RetryPolicy(retry_delay=5), None, RetryPolicy(backoff_multiplier=3)]),
    (RetryPolicy(max_retries=0), [RetryPolicy(max_retries=4), None, None]),
    (None, [None, RetryPolicy(max_retries=0), RetryPolicy(max_retries=2)]),
]


@pytest.mark.parametrize(("own", "layers"), NOT_RETRIED)
def test_a_job_not_retried_has_no_columns_and_no_merge(monkeypatch, own, layers) -> None:
    def merged(_layers):
        raise AssertionError("merged the policy of a job that is not retried")

    monkeypatch.setattr(retry_defaults, "effective_policy", merged)
    assert retry_columns(JobSpec(command=["true"], retry_policy=own), layers) == {}


def test_the_first_layer_setting_max_retries_decides() -> None:
    columns = retry_columns(JobSpec(command=["true"], retry_policy=RetryPolicy(retry_delay=5)),
                            [None, RetryPolicy(max_retries=2), RetryPolicy(max_retries=0, jitter_ratio=0.5)])
    assert columns["max_retries"] == 2 and columns["retry_state"] == RetryState.ARMED
    assert columns["retry_policy"]["retry_delay"] == 5.0 and columns["retry_policy"]["jitter_ratio"] == 0.5
