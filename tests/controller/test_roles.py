"""Who may do what, through the real API: the role table cell by cell, ownership, job tokens, personal tokens that
are revoked or expire, and the users, members and tokens API's validation."""

from __future__ import annotations

import json
import time

import pytest

from corral.core.roles import PROJECT_ROLES, RULES, Action, Role, Scope
from tests.api.conftest import Api
from tests.api.conftest import api as api  # noqa: F401 (the fixture)
from tests.api.test_events_api import reads_of_a_job

PROJECT = "vision"
JOB = {"command": ["true"], "project": PROJECT}
SERVED = {"name": "served", "command": ["true"], "project": PROJECT, "min_replicas": 0}
USERS = {"pa": Role.PROJECT_ADMIN, "mem": Role.MEMBER, "bob": Role.MEMBER, "view": Role.VIEWER}
AS_ROLE = {Role.PROJECT_ADMIN: "pa", Role.MEMBER: "mem", Role.VIEWER: "view", Role.CLUSTER_ADMIN: "root"}


class Team:
    """Users of project vision (and a cluster admin, root), each with a personal token, and a job of bob's."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.tokens: dict[str, str] = {}

    async def build(self) -> Team:
        async with self.api.admin() as admin:
            for name, role in USERS.items():
                await _ok(admin.post("/api/v1/users", json={"name": name, "projects": {PROJECT: role}}), 201)
            await _ok(admin.post("/api/v1/users", json={"name": "root", "cluster_admin": True}), 201)
            for name in (*USERS, "root"):
                issued = await _ok(admin.post("/api/v1/tokens", json={"user": name}), 201)
                self.tokens[name] = issued["token"]
        async with self.as_("bob") as bob:
            self.bobs_job = (await _ok(bob.post("/api/v1/jobs", json=JOB), 201))["id"]
            await _ok(bob.post("/api/v1/deployments", json={**SERVED, "name": "bobs"}), 201)
        return self

    def as_(self, name: str):
        return self.api.as_(self.tokens[name])


async def _ok(call, code: int = 200):
    response = await call
    assert response.status_code == code, response.text
    return response.json() if response.content else None


@pytest.fixture
async def team(api):  # noqa: F811
    return await Team(api).build()


async def _act(team: Team, client, action: Action, own_job: int | None):
    """One request that does `action` in project vision: on bob's job (or deployment), or on `own_job` where given
    (or a deployment of its own)."""
    job = own_job or team.bobs_job
    match action:
        case Action.READ:
            return await client.get(f"/api/v1/jobs/{job}")
        case Action.SUBMIT:
            return await client.post("/api/v1/jobs", json=JOB)
        case Action.CANCEL:
            return await client.post(f"/api/v1/jobs/{job}/cancel")
        case Action.ATTACH:
            return await client.post(f"/api/v1/jobs/{job}/tickets")
        case Action.LOGS:
            return await client.get(f"/api/v1/jobs/{job}/tasks/0/logs")
        case Action.DEPLOY if own_job is None:
            return await client.post("/api/v1/deployments/bobs/scale", json={"replicas": 0})
        case Action.DEPLOY:
            return await client.post("/api/v1/deployments", json=SERVED)
        case Action.PROJECT_TOKENS:
            return await client.get(f"/api/v1/admin/projects/{PROJECT}/tokens")
        case Action.MEMBERS:
            return await client.get(f"/api/v1/projects/{PROJECT}/members")
        case Action.CLUSTER:
            return await client.get("/api/v1/admin/pools")
    raise AssertionError(action)


THROUGH_THE_API = [a for a in Action if a not in (Action.USAGE, Action.AUDIT)]  # listings: their own test below


@pytest.mark.parametrize("action", THROUGH_THE_API)
@pytest.mark.parametrize("role", [Role.CLUSTER_ADMIN, *PROJECT_ROLES])
async def test_each_cell_of_the_role_table_holds_through_the_api(team, role, action):
    scope = RULES[role].get(action)
    async with team.as_(AS_ROLE[role]) as client:
        answer = await _act(team, client, action, None)
        if scope is Scope.ANY:
            assert answer.status_code < 300, answer.text
        elif scope is Scope.OWN:  # bob's is refused, its own allowed
            assert answer.status_code == 403, answer.text
            assert answer.json()["detail"] == f"a {role} of project {PROJECT} may {action} only its own; this one " \
                                              "is bob's"
            own = (await _ok(client.post("/api/v1/jobs", json=JOB), 201))["id"]
            mine = await _act(team, client, action, own)
            assert mine.status_code < 300, mine.text
        else:
            assert answer.status_code == 403, answer.text
            reason = (f"{action} is for cluster admins; {AS_ROLE[role]} is {role}" if action is Action.CLUSTER
                      else f"a {role} of project {PROJECT} may not {action}")
            assert answer.json()["detail"] == reason


@pytest.mark.parametrize("role", [Role.CLUSTER_ADMIN, *PROJECT_ROLES])
async def test_the_usage_and_audit_cells_of_the_role_table_hold_through_the_api(team, role):
    name = AS_ROLE[role]
    async with team.as_(name) as client:
        usage = await client.get("/api/v1/usage", params={"by": "user"})
        audit = await client.get("/api/v1/audit")
    scope = RULES[role].get(Action.USAGE)
    if scope is None:
        assert (usage.status_code, usage.json()["detail"]) == (403, f"{name} may not usage in any project "
                                                                     f"(its role: {role})")
    else:
        assert usage.status_code == 200, usage.text
        if scope is Scope.OWN:
            assert {row["key"] for row in usage.json()["rows"]} <= {name}
    if RULES[role].get(Action.AUDIT) is Scope.ANY:
        assert audit.status_code == 200, audit.text
    else:
        assert (audit.status_code, audit.json()["detail"]) == (403, f"audit is for cluster admins; {name} is {role}")


async def test_a_member_cannot_cancel_another_members_job_but_the_project_admin_can(team):
    async with team.as_("mem") as mem:
        refused = await mem.post(f"/api/v1/jobs/{team.bobs_job}/cancel")
    assert refused.status_code == 403
    assert "may cancel only its own; this one is bob's" in refused.json()["detail"]
    async with team.as_("pa") as project_admin:
        cancelled = await _ok(project_admin.post(f"/api/v1/jobs/{team.bobs_job}/cancel"))
    assert cancelled["state"] in ("CANCELLED", "TERMINATING")
    async with team.as_("root") as root:  # the audit log names both, by name and role
        rows = await _ok(root.get("/api/v1/audit", params={"action": "job.cancel"}))
    assert [(r["actor"], r["role"], r["outcome"], r["job_id"]) for r in rows] == [
        ("pa", Role.PROJECT_ADMIN, 200, team.bobs_job), ("mem", Role.MEMBER, 403, team.bobs_job)]


async def test_a_project_one_does_not_belong_to_is_a_403_with_the_reason(team):
    async with team.as_("mem") as mem:
        submitted = await mem.post("/api/v1/jobs", json={**JOB, "project": "audio"})
        listed = await mem.get("/api/v1/jobs", params={"project": "audio"})
    reason = "mem is not a member of project audio (its projects: vision)"
    assert (submitted.status_code, submitted.json()["detail"]) == (403, reason)
    assert (listed.status_code, listed.json()["detail"]) == (403, reason)


async def test_owners_are_recorded_and_listings_show_only_what_the_caller_may_read(team):
    async with team.api.admin() as admin:
        elsewhere = (await _ok(admin.post("/api/v1/jobs", json={**JOB, "project": "audio"}), 201))["id"]
        everyone = {j["id"] for j in (await _ok(admin.get("/api/v1/jobs")))["items"]}
    async with team.as_("mem") as mem:
        mine = (await _ok(mem.post("/api/v1/jobs", json=JOB), 201))
        listed = {j["id"]: j["owner"] for j in (await _ok(mem.get("/api/v1/jobs")))["items"]}
        by_bob = [j["id"] for j in (await _ok(mem.get("/api/v1/jobs", params={"owner": "bob"})))["items"]]
        in_vision = (await _ok(mem.get("/api/v1/jobs", params={"project": PROJECT, "count": True})))["total"]
        hidden = await mem.get(f"/api/v1/jobs/{elsewhere}")
    assert mine["owner"] == "mem"
    assert listed == {mine["id"]: "mem", team.bobs_job: "bob"} and elsewhere in everyone
    assert by_bob == [team.bobs_job] and in_vision == 2
    assert hidden.status_code == 403


def _events(stream: str) -> list[dict]:
    return [json.loads(line.removeprefix("data: ")) for line in stream.splitlines() if line.startswith("data: ")]


async def test_the_event_stream_shows_a_reader_the_jobs_and_deployments_of_its_projects(team):
    """The dashboard follows the whole stream: a member, a viewer, or a user of no project gets what it may read."""
    async with team.api.admin() as admin:
        elsewhere = (await _ok(admin.post("/api/v1/jobs", json={**JOB, "project": "audio"}), 201))["id"]
        await _ok(admin.post("/api/v1/deployments", json={**SERVED, "name": "theirs", "project": "audio"}), 201)
        await _ok(admin.post("/api/v1/users", json={"name": "loner"}), 201)
        loner = (await _ok(admin.post("/api/v1/tokens", json={"user": "loner"}), 201))["token"]
        whole = _events((await admin.get("/api/v1/events", params={"follow": "false"})).text)
    async with team.as_("view") as viewer:
        seen = _events((await viewer.get("/api/v1/events", params={"follow": "false"})).text)
        last = _events((await viewer.get("/api/v1/events", params={"follow": "false", "last": 2})).text)
        named = await viewer.get("/api/v1/events", params={"follow": "false", "job": team.bobs_job})
        not_theirs = await viewer.get("/api/v1/events", params={"follow": "false", "job": elsewhere})
    async with team.api.as_(loner) as nobody:
        answer = await nobody.get("/api/v1/events", params={"follow": "false"})
    assert {elsewhere, team.bobs_job} <= {e["job_id"] for e in whole} and "theirs" in {e["deployment"] for e in whole}
    assert team.bobs_job in {e["job_id"] for e in seen} and "bobs" in {e["deployment"] for e in seen}
    assert all(e["job_id"] == team.bobs_job or e["deployment"] == "bobs" for e in seen), seen
    assert last == seen[-2:]
    assert answer.status_code == 200 and _events(answer.text) == []
    assert named.status_code == 200 and {e["job_id"] for e in _events(named.text)} == {team.bobs_job}
    assert not_theirs.status_code == 403 and "not a member of project audio" in not_theirs.json()["detail"]


async def test_a_readers_stream_of_a_named_job_reads_the_jobs_row_once(team):
    """Whose job it is comes with the stream's start, in one statement, and is checked before anything is sent."""
    reads = reads_of_a_job(team.api.app.state.services.store)
    async with team.as_("view") as viewer:
        named = await viewer.get("/api/v1/events", params={"follow": "false", "job": team.bobs_job})
    assert named.status_code == 200 and len(reads) == 1 and team.bobs_job in reads[0]


async def test_a_job_token_acts_as_its_owner_capped_to_the_jobs_project_and_priority(team):
    async with team.as_("bob") as bob:
        driver = await _ok(bob.post("/api/v1/jobs", json={**JOB, "priority": 10}), 201)
    async with team.api.job(driver["id"]) as task:
        child = await _ok(task.post("/api/v1/jobs", json={"command": ["true"]}), 201)
        higher = await task.post("/api/v1/jobs", json={"command": ["true"], "priority": 50})
        other_project = await task.post("/api/v1/jobs", json={**JOB, "project": "audio"})
        whoami = await _ok(task.get("/api/v1/whoami"))
        pools = await task.get("/api/v1/admin/pools")
    assert (child["owner"], child["spec"]["project"], child["priority"]) == ("bob", PROJECT, 10)
    assert higher.status_code == 403 and other_project.status_code == 403
    assert whoami == {"name": "bob", "role": "member", "cluster_admin": False, "projects": {PROJECT: "member"},
                      "token": {"kind": "job", "id": driver["id"], "expires_at": None}}
    assert pools.status_code == 401


async def test_a_revoked_token_is_refused_at_once(team):
    async with team.as_("mem") as mem:
        tokens = await _ok(mem.get("/api/v1/tokens"))
        assert (await mem.get("/api/v1/whoami")).status_code == 200
        await _ok(mem.delete(f"/api/v1/tokens/{tokens[0]['id']}"), 204)
        refused = await mem.get("/api/v1/whoami")
    assert (refused.status_code, refused.json()["detail"]) == (401, "wrong token")


async def test_an_expired_token_and_a_disabled_users_token_are_refused(team, monkeypatch):
    async with team.as_("mem") as mem:
        issued = await _ok(mem.post("/api/v1/tokens", json={"name": "short", "expires_in": 60}), 201)
    monkeypatch.setattr(time, "time", lambda real=time.time: real() + 61)
    async with team.api.as_(issued["token"]) as late:
        assert (await late.get("/api/v1/whoami")).status_code == 401
    monkeypatch.undo()
    async with team.api.admin() as admin:
        await _ok(admin.patch("/api/v1/users/view", json={"disabled": True}))
    async with team.as_("view") as view:
        assert (await view.get("/api/v1/whoami")).status_code == 401


async def test_whoami_names_the_caller_and_its_token(team):
    async with team.api.admin() as admin:
        assert await _ok(admin.get("/api/v1/whoami")) == {
            "name": "admin", "role": "cluster-admin", "cluster_admin": True, "projects": {},
            "token": {"kind": "admin", "id": None, "expires_at": None}}
    async with team.as_("pa") as pa:
        me = await _ok(pa.get("/api/v1/whoami"))
    assert (me["name"], me["role"], me["projects"], me["token"]["kind"]) == \
        ("pa", "project-admin", {PROJECT: "project-admin"}, "user")
    assert me["token"]["id"] is not None


async def test_a_project_admin_manages_its_projects_members_only(team):
    async with team.as_("pa") as pa:
        await _ok(pa.put(f"/api/v1/projects/{PROJECT}/members/root", json={"role": "viewer"}))
        members = await _ok(pa.get(f"/api/v1/projects/{PROJECT}/members"))
        await _ok(pa.delete(f"/api/v1/projects/{PROJECT}/members/root"), 204)
        elsewhere = await pa.put("/api/v1/projects/audio/members/mem", json={"role": "member"})
        users = await pa.get("/api/v1/users")
    assert {m["name"]: m["role"] for m in members}["root"] == "viewer"
    assert elsewhere.status_code == 403 and users.status_code == 403


@pytest.mark.parametrize("body", [
    {"name": "Alice"}, {"name": "9lives"}, {"name": "a" * 33}, {"name": "ok", "unix_user": "no such"},
    {"name": "ok", "projects": {"vision": "cluster-admin"}}, {"name": "ok", "projects": {"bad project": "member"}},
    {"name": "ok", "projects": {"vision": "owner"}}, {"name": "ok", "extra": 1}, {},
])
async def test_bad_users_are_a_422(api, body):  # noqa: F811
    async with api.admin() as admin:
        assert (await admin.post("/api/v1/users", json=body)).status_code == 422


@pytest.mark.parametrize("body", [{"expires_in": 59}, {"expires_in": 10**10}, {"name": ""}, {"user": "Bad"},
                                  {"name": "x" * 101}, {"expires_in": "soon"}])
async def test_bad_token_requests_are_a_422(team, body):
    async with team.as_("mem") as mem:
        assert (await mem.post("/api/v1/tokens", json=body)).status_code == 422


async def test_users_members_and_tokens_refuse_what_is_not_there_or_taken(team):
    async with team.api.admin() as admin:
        assert (await admin.post("/api/v1/users", json={"name": "mem"})).status_code == 409
        assert (await admin.post("/api/v1/users", json={"name": "admin"})).status_code == 409
        assert (await admin.get("/api/v1/users/nobody")).status_code == 404
        assert (await admin.patch("/api/v1/users/nobody", json={"disabled": True})).status_code == 404
        assert (await admin.put(f"/api/v1/projects/{PROJECT}/members/nobody", json={"role": "member"})).status_code \
            == 404
        assert (await admin.put(f"/api/v1/projects/{PROJECT}/members/mem", json={"role": "boss"})).status_code == 422
        assert (await admin.delete("/api/v1/projects/audio/members/mem")).status_code == 404
        assert (await admin.post("/api/v1/tokens", json={})).status_code == 422  # the admin token is no user's
        assert (await admin.post("/api/v1/tokens", json={"user": "nobody"})).status_code == 404
        assert (await admin.delete("/api/v1/tokens/999")).status_code == 404
        listed = await _ok(admin.get("/api/v1/tokens"))
    assert {t["user"] for t in listed} == {*USERS, "root"} and all("token" not in t for t in listed)
    async with team.as_("mem") as mem:
        others = await mem.get("/api/v1/tokens", params={"user": "bob"})
        bobs = next(t["id"] for t in listed if t["user"] == "bob")
        assert (await mem.delete(f"/api/v1/tokens/{bobs}")).status_code == 404
        assert (await mem.post("/api/v1/tokens", json={"user": "bob"})).status_code == 403
    assert others.status_code == 403


async def test_the_queue_shows_a_member_its_projects_jobs_at_their_places_in_the_whole_queue(team):
    async with team.api.admin() as admin:
        await _ok(admin.post("/api/v1/jobs", json={**JOB, "project": "audio"}), 201)
    async with team.as_("mem") as mem:
        mine = (await _ok(mem.post("/api/v1/jobs", json=JOB), 201))["id"]
        queue = await _ok(mem.get("/api/v1/queue"))
    assert queue["total"] == 2
    assert [(e["position"], e["job"]["id"]) for e in queue["items"]] == [(1, team.bobs_job), (3, mine)]
