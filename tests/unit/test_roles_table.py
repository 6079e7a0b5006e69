"""core.roles.decide over RULES: every cell of the table, ownership, projects one does not belong to, cluster
actions, and the role a person reads."""

from __future__ import annotations

import pytest

from corral.core.roles import PROJECT_ROLES, RULES, Action, Principal, Role, Scope, decide

CELLS = [(role, action) for role in PROJECT_ROLES for action in Action]


@pytest.mark.parametrize(("role", "action"), CELLS)
def test_each_cell_decides_as_the_table_says(role, action):
    alice = Principal("alice", projects={"vision": role})
    scope = RULES[role].get(action)
    own, others = decide(alice, action, "vision", "alice"), decide(alice, action, "vision", "bob")
    if scope is Scope.ANY:
        assert own is None and others is None
    elif scope is Scope.OWN:
        assert own is None
        assert others == f"a {role} of project vision may {action} only its own; this one is bob's"
    else:
        assert own == others == f"a {role} of project vision may not {action}"


@pytest.mark.parametrize("action", list(Action))
def test_a_cluster_admin_may_do_everything_everywhere(action):
    root = Principal("root", cluster_admin=True)
    assert decide(root, action, "anything", "bob") is None and decide(root, action) is None


def test_a_project_one_does_not_belong_to_is_refused_with_ones_projects():
    alice = Principal("alice", projects={"vision": Role.MEMBER, "audio": Role.VIEWER})
    assert decide(alice, Action.READ, "text") == "alice is not a member of project text (its projects: audio, vision)"
    assert decide(Principal("nobody"), Action.READ, "text") == \
        "nobody is not a member of project text (its projects: none)"


def test_cluster_actions_and_the_audit_log_are_cluster_admins_alone():
    admin_of_vision = Principal("pa", projects={"vision": Role.PROJECT_ADMIN})
    for action in (Action.CLUSTER, Action.AUDIT):
        assert decide(admin_of_vision, action) == f"{action} is for cluster admins; pa is project-admin"


def test_a_listing_needs_the_action_in_some_project():
    viewer = Principal("v", projects={"vision": Role.VIEWER})
    assert decide(viewer, Action.READ) is None
    assert decide(viewer, Action.SUBMIT) == "v may not submit in any project (its role: viewer)"


def test_the_role_a_person_reads_is_the_highest_of_its_projects():
    assert Principal("a", projects={"x": Role.VIEWER, "y": Role.MEMBER}).role == Role.MEMBER
    assert Principal("a", cluster_admin=True).role == Role.CLUSTER_ADMIN
    assert Principal("a").role == "none"
