"""The deployment spec: defaults, the replica job it makes, and every bad input named."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from corral.core.deployment_spec import DeploymentSpec


def test_defaults_and_the_replica_job():
    spec = DeploymentSpec(name="emb", command=["serve"], resources={"gpu": 1}, env={"A": "1"})
    assert (spec.min_replicas, spec.max_replicas, spec.model_names, spec.initial_replicas) == (1, 1, ["emb"], 1)
    job = spec.replica_job()
    assert job.allocate_port and job.resources.gpu == 1 and job.max_retries_failure == 0
    assert job.env == {"A": "1", "CORRAL_DEPLOYMENT": "emb"} and job.name == "emb.replica"


def test_scale_to_zero_starts_with_nothing_unless_preloaded():
    assert DeploymentSpec(name="a", command=["s"], min_replicas=0).initial_replicas == 0
    assert DeploymentSpec(name="a", command=["s"], min_replicas=0, preload=True).initial_replicas == 1
    assert DeploymentSpec(name="a", command=["s"], min_replicas=0).max_replicas == 1


def test_durations_take_units():
    spec = DeploymentSpec(name="a", command=["s"], idle_timeout="10m", health={"interval": "0.5s", "timeout": 2})
    assert (spec.idle_timeout, spec.health.interval, spec.health.timeout) == (600.0, 0.5, 2.0)


@pytest.mark.parametrize(("fields", "message"), [
    ({"name": "Upper"}, "not a deployment name"),
    ({"name": "x" * 64}, "not a deployment name"),
    ({"command": []}, "command is empty"),
    ({"min_replicas": 3, "max_replicas": 2}, "below min_replicas"),
    ({"min_replicas": -1}, "min_replicas"),
    ({"health": {"path": "health"}}, "must start with '/'"),
    ({"health": {"threshold": 0}}, "threshold"),
    ({"idle_timeout": "soon"}, "not a duration"),
    ({"concurrency": 0}, "concurrency"),
    ({"target_concurrency": 0}, "target_concurrency"),
    ({"target_concurrency": -1}, "target_concurrency"),
    ({"scale_down_delay": -5}, "scale_down_delay"),
    ({"health": {"startup_timeout": 0}}, "startup_timeout"),
    ({"env": {"1BAD": "x"}}, "not an environment variable name"),
    ({"replicas": 2}, "replicas"),  # the job field, not a deployment one
])
def test_bad_fields_are_named(fields, message):
    with pytest.raises(ValidationError, match=message):
        DeploymentSpec.model_validate({"name": "ok", "command": ["serve"], **fields})
