"""Who may call a deployment through the router: the rule of `may_call`, case by case."""

from __future__ import annotations

import pytest

from corral.core.deployment_spec import DeploymentSpec
from corral.core.keys import key_hash
from corral.core.serving import DeploymentFacts, DeploymentState
from corral.serving.access import bearer, may_call

ADMIN = "admin-token"


def facts(public: bool = False) -> DeploymentFacts:
    spec = DeploymentSpec(name="svc", command=["x"], project="team-a", public=public)
    return DeploymentFacts(1, "svc", spec, DeploymentState.READY, 0.0, 1, (key_hash("own-key"),),
                           (key_hash("team-a-token"),))


@pytest.mark.parametrize(("key", "allowed"), [
    (ADMIN, True),
    ("own-key", True),
    ("team-a-token", True),
    ("team-b-token", False),  # a token of another project: its hash is not among the deployment's project's
    ("own-key ", False),
    (None, False),
    ("", False),
])
def test_the_admin_token_its_own_keys_and_its_projects_tokens_may_call_a_deployment(key, allowed):
    assert may_call(facts(), key, ADMIN) is allowed


def test_a_public_deployment_needs_no_key():
    assert may_call(facts(public=True), None, ADMIN)


@pytest.mark.parametrize(("header", "key"), [
    ("Bearer abc", "abc"), ("bearer abc ", "abc"), ("Basic abc", None), ("Bearer ", None), (None, None),
])
def test_the_key_is_the_bearer_token_of_the_authorization_header(header, key):
    assert bearer(header) == key
