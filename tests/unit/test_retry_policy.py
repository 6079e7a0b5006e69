"""Retry policies as written: validation that names the field, and the precedence of their layers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from corral.core.retry_policy import (
    BUILTIN_DEFAULT,
    NEVER_RETRIED,
    RETRIABLE_CAUSES,
    RetryPolicy,
    effective_policy,
)
from corral.core.spec import JobSpec


def test_the_builtin_default_retries_nothing_and_sets_every_field():
    assert BUILTIN_DEFAULT.max_retries == 0
    assert all(getattr(BUILTIN_DEFAULT, name) is not None for name in RetryPolicy.model_fields)
    assert effective_policy([]) == BUILTIN_DEFAULT
    assert set(BUILTIN_DEFAULT.eligible_causes) == RETRIABLE_CAUSES


def test_job_over_project_over_cluster_field_by_field():
    job = RetryPolicy(max_retries=3)
    project = RetryPolicy(max_retries=1, retry_delay=5, backoff="exponential")
    cluster = RetryPolicy(retry_delay=60, backoff="fixed", jitter="none", max_retry_delay=600)
    merged = effective_policy([job, project, cluster])
    assert (merged.max_retries, merged.retry_delay, merged.backoff, merged.jitter, merged.max_retry_delay) == (
        3, 5, "exponential", "none", 600)
    assert merged.backoff_multiplier == BUILTIN_DEFAULT.backoff_multiplier  # nobody set it


def test_missing_layers_are_skipped():
    assert effective_policy([None, RetryPolicy(max_retries=2), None]).max_retries == 2


_fields = st.fixed_dictionaries({}, optional={
    "max_retries": st.integers(0, 10), "retry_delay": st.floats(0.1, 100), "jitter_ratio": st.floats(0, 1),
    "backoff": st.sampled_from(["fixed", "exponential"]), "jitter": st.sampled_from(["none", "random"]),
})


@given(layers=st.lists(_fields, max_size=4))
def test_each_field_comes_from_the_first_layer_that_sets_it(layers):
    merged = effective_policy([RetryPolicy(**layer) for layer in layers])
    for name in RetryPolicy.model_fields:
        setters = [layer[name] for layer in layers if name in layer]
        expected = RetryPolicy(**{name: setters[0]}) if setters else BUILTIN_DEFAULT
        assert getattr(merged, name) == getattr(expected, name)


@pytest.mark.parametrize(("fields", "where"), [
    ({"max_retries": -1}, "max_retries"),
    ({"max_retries": 100_000}, "max_retries"),
    ({"retry_delay": 0}, "retry_delay"),
    ({"retry_delay": "soon"}, "retry_delay"),
    ({"backoff": "linear"}, "backoff"),
    ({"backoff_multiplier": 0.5}, "backoff_multiplier"),
    ({"max_retry_delay": -5}, "max_retry_delay"),
    ({"jitter": "some"}, "jitter"),
    ({"jitter_ratio": 1.5}, "jitter_ratio"),
    ({"eligible_causes": ["cosmic_rays"]}, "eligible_causes"),
    ({"eligible_causes": ["nonzero_exit", "user_cancelled"]}, "eligible_causes"),
    ({"retries": 3}, "retries"),
])
def test_bad_values_name_the_field(fields, where):
    with pytest.raises(ValidationError) as error:
        JobSpec(command=["true"], retry_policy=fields)
    assert [e["loc"][:2] for e in error.value.errors()] == [("retry_policy", where)]


@pytest.mark.parametrize("cause", sorted(NEVER_RETRIED))
def test_a_never_retried_cause_cannot_be_made_eligible(cause):
    with pytest.raises(ValidationError, match=f"{cause} is never retried"):
        RetryPolicy(eligible_causes=[cause])


def test_durations_read_like_the_rest_of_the_spec():
    p = RetryPolicy(retry_delay="30s", max_retry_delay="2h")
    assert (p.retry_delay, p.max_retry_delay) == (30, 7200)


def test_a_spec_with_a_policy_survives_its_json_round_trip():
    spec = JobSpec(command=["true"], retry_policy={"max_retries": 2, "eligible_causes": ["oom_killed"]})
    assert JobSpec.model_validate(spec.model_dump(mode="json")) == spec
