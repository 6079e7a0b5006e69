"""`corral user|member|token|whoami` against the fake client, and `corral jobs --mine|--user|--project`."""

import json

from tests.cli.conftest import job_view


def test_user_create_with_projects_and_a_role(cli, fake):
    result = cli("user", "create", "alice", "--project", "vision", "--project", "ml", "--role", "viewer",
                 "--unix-user", "alice")
    assert result.exit_code == 0, result.output
    assert fake.calls == [("create_user", "alice", False, "alice", {"vision": "viewer", "ml": "viewer"})]
    assert result.output == "user alice created (ml:viewer vision:viewer, runs as alice)\n"


def test_user_create_defaults_to_member_and_may_be_a_cluster_admin(cli, fake):
    assert cli("user", "create", "bob", "--project", "vision").exit_code == 0
    assert cli("user", "create", "root", "--cluster-admin").output == "user root created (cluster admin)\n"
    assert fake.calls == [("create_user", "bob", False, None, {"vision": "member"}),
                          ("create_user", "root", True, None, {})]


def test_user_create_refuses_a_bad_role_and_a_role_without_project(cli, fake):
    bad = cli("user", "create", "alice", "--project", "vision", "--role", "owner")
    assert bad.exit_code == 2 and "'owner' is not one of 'project-admin', 'member', 'viewer'" in bad.output
    lone = cli("user", "create", "alice", "--role", "viewer")
    assert lone.exit_code == 2 and "--role is the role in a --project" in lone.output
    assert fake.calls == []


def test_user_create_of_an_existing_user_is_the_controllers_error(cli, fake):
    cli("user", "create", "alice")
    again = cli("user", "create", "alice")
    assert (again.exit_code, again.stderr) == (1, "error: user alice exists\n")


def test_user_list_table_and_json(cli, fake):
    cli("user", "create", "alice", "--project", "vision", "--unix-user", "alice")
    cli("user", "create", "root", "--cluster-admin")
    lines = cli("user", "list").output.splitlines()
    assert lines[0].split() == ["NAME", "ROLE", "PROJECTS", "UNIX", "USER", "CREATED", "DISABLED"]
    assert lines[1].split()[:4] == ["alice", "-", "vision:member", "alice"]
    assert lines[2].split()[:3] == ["root", "cluster-admin", "-"]
    assert [u["name"] for u in json.loads(cli("user", "list", "--json").output)] == ["alice", "root"]


def test_user_set_sends_only_what_is_given(cli, fake):
    cli("user", "create", "alice")
    assert cli("user", "set", "alice", "--disable").output == "user alice: -, disabled\n"
    assert cli("user", "set", "alice", "--enable", "--cluster-admin").exit_code == 0
    assert cli("user", "set", "alice", "--no-unix-user").exit_code == 0
    assert fake.calls[1:] == [("update_user", "alice", {"disabled": True}),
                              ("update_user", "alice", {"cluster_admin": True, "disabled": False}),
                              ("update_user", "alice", {"unix_user": None})]


def test_user_set_refuses_nothing_to_change_contradictions_and_a_missing_user(cli, fake):
    nothing = cli("user", "set", "alice")
    assert nothing.exit_code == 2 and "nothing to change" in nothing.output
    both = cli("user", "set", "alice", "--unix-user", "a", "--no-unix-user")
    assert both.exit_code == 2 and "contradict" in both.output
    missing = cli("user", "set", "nobody", "--disable")
    assert (missing.exit_code, missing.stderr) == (1, "error: no user nobody\n")


def test_member_set_list_and_remove(cli, fake):
    cli("user", "create", "alice")
    assert cli("member", "set", "vision", "alice", "project-admin").output == \
        "alice is a project-admin of project vision\n"
    listed = cli("member", "list", "vision").output.splitlines()
    assert [line.split() for line in listed] == [["NAME", "ROLE"], ["alice", "project-admin"]]
    assert json.loads(cli("member", "list", "vision", "--json").output) == [{"name": "alice", "role": "project-admin"}]
    assert cli("member", "remove", "vision", "alice").output == "alice is no longer a member of project vision\n"
    assert cli("member", "list", "vision").output.split() == ["NAME", "ROLE"]


def test_member_refuses_a_bad_role_a_missing_user_and_a_non_member(cli, fake):
    bad = cli("member", "set", "vision", "alice", "admin")
    assert bad.exit_code == 2 and "'admin' is not one of" in bad.output
    missing = cli("member", "set", "vision", "nobody", "member")
    assert (missing.exit_code, missing.stderr) == (1, "error: no user nobody\n")
    gone = cli("member", "remove", "vision", "nobody")
    assert (gone.exit_code, gone.stderr) == (1, "error: nobody is not a member of project vision\n")


def test_token_create_prints_the_token_once_on_stdout_and_warns_on_stderr(cli, fake):
    result = cli("token", "create", "--name", "laptop", "--expires", "30d")
    assert result.exit_code == 0, result.output
    assert result.stdout == "cu_ab12-the-secret\n"
    assert "shown only now" in result.stderr and "token 1 (laptop), valid until " in result.stderr
    assert fake.calls == [("create_token", "laptop", 30 * 86400, None)]


def test_token_create_for_another_user_without_expiry_named_after_the_host(cli, fake, monkeypatch):
    monkeypatch.setattr("socket.gethostname", lambda: "gpu-box")
    result = cli("token", "create", "--user", "bob", "--json")
    assert fake.calls == [("create_token", "gpu-box", None, "bob")]
    assert json.loads(result.stdout)["token"] == "cu_ab12-the-secret"
    assert "valid until revoked" in result.stderr


def test_token_create_refuses_a_bad_expiry(cli, fake):
    for expiry, says in (("30x", "not a duration: '30x'"), ("0s", "must be more than zero"),
                         ("-1d", "not a duration")):
        result = cli("token", "create", "--expires", expiry)
        assert result.exit_code == 2 and says in result.output, (expiry, result.output)
    assert fake.calls == []


def test_token_list_shows_no_secret_and_revoke(cli, fake):
    cli("token", "create", "--name", "laptop", "--expires", "2d")
    cli("token", "create", "--name", "ci", "--user", "bob")
    listed = cli("token", "list").output
    assert "cu_ab12-the-secret" not in listed
    rows = [line.split() for line in listed.splitlines()]
    assert rows[0] == ["ID", "USER", "NAME", "PREFIX", "CREATED", "EXPIRES"]
    assert rows[1][:4] == ["1", "alice", "laptop", "cu_ab12"] and rows[1][-2:] == ["in", "1d"]
    assert rows[2][:4] == ["2", "bob", "ci", "cu_ab12"] and rows[2][-1] == "never"
    cli("token", "list", "--user", "bob")
    assert cli("token", "revoke", "2").output == "token 2 revoked\n"
    assert fake.calls[-2:] == [("tokens", "bob"), ("revoke_token", 2)]
    assert cli("token", "list").output.splitlines()[2].split()[-1] == "revoked"
    fake.token_views[0]["expires_at"] = 1.0
    assert cli("token", "list").output.splitlines()[1].split()[-1] == "expired"


def test_token_revoke_refuses_a_bad_id_and_a_missing_token(cli, fake):
    assert cli("token", "revoke", "0").exit_code == 2
    assert cli("token", "revoke", "x").exit_code == 2
    missing = cli("token", "revoke", "9")
    assert (missing.exit_code, missing.stderr) == (1, "error: alice has no token 9\n")


def test_whoami(cli, fake):
    assert cli("whoami").output == "alice (member)\n  vision: member\ntoken: user #3\n"
    fake.me = {"name": "admin", "role": "cluster-admin", "cluster_admin": True, "projects": {},
               "token": {"kind": "admin"}}
    assert cli("whoami").output == "admin (cluster-admin)\ntoken: admin\n"
    assert json.loads(cli("whoami", "--json").output)["name"] == "admin"


def test_jobs_filters_by_owner_and_project_and_shows_the_owner(cli, fake):
    fake.jobs = [job_view(1, owner="bob")]
    result = cli("jobs", "--user", "bob", "--project", "vision")
    assert result.output.splitlines()[1].split()[:3] == ["1", "echo", "bob"]
    assert cli("jobs", "--mine").exit_code == 0
    assert cli("jobs").exit_code == 0
    assert fake.listed == [{"owner": "bob", "project": "vision"}, {"owner": "alice", "project": None},
                           {"owner": None, "project": None}]


def test_jobs_refuses_mine_with_user(cli, fake):
    result = cli("jobs", "--mine", "--user", "bob")
    assert result.exit_code == 2 and "--mine and --user" in result.output
    assert fake.listed == []
