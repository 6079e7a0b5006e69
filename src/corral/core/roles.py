"""Who may do what: roles, actions, and the one table between them.

A caller is a Principal: the admin token (the break-glass credential, a cluster admin), a user by one of its
personal tokens (a cluster admin, or a role in each of its projects), or a task by its job's token, which acts as
the job's owner capped to the job's project (and priority). Every route names the Action it performs; `decide`
answers it from RULES alone, the same for every route, so the table is the whole policy and is tested cell by cell.

A scope says which objects of a project a role's action reaches: ANY of the project's, or only those it OWNs.
A cluster admin may do everything everywhere; quotas, pools, users and settings are a cluster admin's alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class Role(StrEnum):
    CLUSTER_ADMIN = "cluster-admin"
    PROJECT_ADMIN = "project-admin"
    MEMBER = "member"
    VIEWER = "viewer"


PROJECT_ROLES = (Role.PROJECT_ADMIN, Role.MEMBER, Role.VIEWER)  # what a membership may grant


class Action(StrEnum):
    READ = "read"  # see a project's jobs, deployments, queue, events and workers
    SUBMIT = "submit"  # submit jobs in a project
    CANCEL = "cancel"  # cancel (or retry) a job
    ATTACH = "attach"  # a terminal, exec or port-forward into a job's task
    LOGS = "logs"  # read a job's logs and results
    DEPLOY = "deploy"  # create, scale or undeploy a deployment
    PROJECT_TOKENS = "project-tokens"  # issue and revoke a project's serving tokens
    MEMBERS = "members"  # add, change and remove a project's members
    USAGE = "usage"  # read usage and cost
    AUDIT = "audit"  # read the audit log
    CLUSTER = "cluster"  # pools, quotas, settings, users, workers, retry defaults


class Scope(StrEnum):
    ANY = "any"  # any object of the project
    OWN = "own"  # only objects the caller owns


RULES: Mapping[Role, Mapping[Action, Scope]] = {
    Role.CLUSTER_ADMIN: {action: Scope.ANY for action in Action},
    Role.PROJECT_ADMIN: {
        Action.READ: Scope.ANY, Action.SUBMIT: Scope.ANY, Action.CANCEL: Scope.ANY, Action.ATTACH: Scope.ANY,
        Action.LOGS: Scope.ANY, Action.DEPLOY: Scope.ANY, Action.PROJECT_TOKENS: Scope.ANY,
        Action.MEMBERS: Scope.ANY, Action.USAGE: Scope.ANY,
    },
    Role.MEMBER: {
        Action.READ: Scope.ANY, Action.SUBMIT: Scope.ANY, Action.CANCEL: Scope.OWN, Action.ATTACH: Scope.OWN,
        Action.LOGS: Scope.OWN, Action.DEPLOY: Scope.OWN, Action.USAGE: Scope.OWN,
    },
    Role.VIEWER: {Action.READ: Scope.ANY},
}

ADMIN = "admin"  # the name the admin token acts under


@dataclass(frozen=True)
class Principal:
    """Who calls. `projects`: the caller's role in each project it belongs to (a cluster admin needs none)."""

    name: str
    cluster_admin: bool = False
    projects: Mapping[str, Role] = field(default_factory=dict)
    job_id: int | None = None  # a task's call, by its job's token: capped to that job's project
    priority_cap: int | None = None  # a job token submits at most at its job's priority

    @property
    def role(self) -> str:
        """The role a person reads: cluster-admin, else the highest of its projects' roles (or none)."""
        if self.cluster_admin:
            return Role.CLUSTER_ADMIN
        return next((role for role in PROJECT_ROLES if role in self.projects.values()), "none")


def decide(principal: Principal, action: Action, project: str | None = None, owner: str | None = None) -> str | None:
    """None when `principal` may do `action` on an object of `project` owned by `owner` (no project: a cluster-wide
    action, or a listing each row of which is judged alone); else why not, in a sentence."""
    if principal.cluster_admin:
        return None
    if project is None:
        if action in (Action.CLUSTER, Action.AUDIT):
            return f"{action} is for cluster admins; {principal.name} is {principal.role}"
        return None if any(action in RULES[role] for role in principal.projects.values()) else \
            f"{principal.name} may not {action} in any project (its role: {principal.role})"
    role = principal.projects.get(project)
    if role is None:
        belongs = ", ".join(sorted(principal.projects)) or "none"
        return f"{principal.name} is not a member of project {project} (its projects: {belongs})"
    scope = RULES[role].get(action)
    if scope is None:
        return f"a {role} of project {project} may not {action}"
    if scope is Scope.OWN and owner != principal.name:
        return f"a {role} of project {project} may {action} only its own; this one is {owner}'s"
    return None
