"""End to end: project tokens open the router to one project's deployments (the controller's and a standalone one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest

from tests.e2e.cluster import Cluster
from tests.e2e.test_serving import deploy, info, standalone_router
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e


def corral(cluster: Cluster, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CORRAL_URL": cluster.url, "CORRAL_TOKEN": cluster.admin_token}
    return subprocess.run([sys.executable, "-m", "corral", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def status(url: str, token: str) -> int:
    """The status of a GET with this bearer token; 0 while nothing answers."""
    try:
        return httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=90).status_code
    except httpx.HTTPError:
        return 0


def test_a_project_token_calls_its_projects_deployments_and_nothing_else(cluster):
    issued = corral(cluster, "project", "token", "team-a")
    assert issued.returncode == 0, issued.stderr
    team_a = issued.stdout.strip()
    team_b = cluster.http.post("/api/v1/admin/projects/team-b/tokens", json={}).json()["token"]
    assert team_a.startswith("crp-") and team_a != team_b
    deploy(cluster, "mine", min_replicas=0, project="team-a", model_names=["mine-model"])
    deploy(cluster, "theirs", min_replicas=0, project="team-b")
    deploy(cluster, "shared", min_replicas=0)  # the default project
    mine = f"{cluster.url}/serve/mine/whoami"

    # Another project's token, or one for no project, is refused before anything starts.
    assert status(mine, team_b) == 401
    assert status(f"{cluster.url}/serve/shared/whoami", team_a) == 401
    assert info(cluster, "mine")["replicas"] == 0 and not info(cluster, "mine")["replica_list"]
    # Its own project's token cold-starts the deployment; the model list shows only what it may call.
    assert status(mine, team_a) == 200
    models = httpx.get(f"{cluster.url}/v1/models", headers={"Authorization": f"Bearer {team_a}"}, timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["mine-model"]
    # The replica's job is the project's, so its quota and fair share count it.
    job = cluster.get(f"/api/v1/jobs/{info(cluster, 'mine')['replica_list'][0]['job_id']}")
    assert job["spec"]["project"] == "team-a"
    # It reaches the router alone, never the API.
    assert httpx.get(f"{cluster.url}/api/v1/jobs", headers={"Authorization": f"Bearer {team_a}"},
                     timeout=10).status_code == 401

    with standalone_router(cluster) as router:
        far = f"{router}/serve/mine/whoami"
        wait_for(lambda: status(far, team_a) == 200, 30, "the standalone router to accept the project token")
        assert status(far, team_b) == 401

        listed = corral(cluster, "project", "tokens", "team-a", "--json")
        assert listed.returncode == 0, listed.stderr
        (token,) = json.loads(listed.stdout)
        assert set(token) == {"id", "project", "created_at"} and team_a not in listed.stdout
        revoked = corral(cluster, "project", "revoke", "team-a", str(token["id"]))
        assert revoked.returncode == 0 and "revoked" in revoked.stdout, revoked.stderr
        assert status(mine, team_a) == 401  # at once here: revoking republishes the catalog before answering
        wait_for(lambda: status(far, team_a) == 401, 30, "the standalone router to drop the revoked token")
    assert corral(cluster, "project", "tokens", "team-a", "--json").stdout.strip() == "[]"


def test_bad_project_token_requests_are_refused_and_nothing_is_stored(cluster):
    tokens = "/api/v1/admin/projects/{}/tokens"
    for project, body in (("bad name", {}), ("-lead", {}), ("team", {"token": "short"}),
                          ("team", {"token": "has a space in it, 16+"}), ("team", {"token": 5})):
        response = cluster.http.post(tokens.format(project), json=body)
        assert response.status_code == 422, (project, body, response.text)
    assert cluster.get(tokens.format("team")) == []
    chosen = "a-token-chosen-by-hand"
    assert cluster.http.post(tokens.format("team"), json={"token": chosen}).status_code == 201
    taken = cluster.http.post(tokens.format("other"), json={"token": chosen})
    assert taken.status_code == 409 and "already issued" in taken.json()["detail"]
    assert cluster.get(tokens.format("other")) == [] and len(cluster.get(tokens.format("team"))) == 1
    (kept,) = cluster.get(tokens.format("team"))
    assert cluster.http.delete(f"{tokens.format('other')}/{kept['id']}").status_code == 404  # not that project's
    assert cluster.http.delete(f"{tokens.format('team')}/999").status_code == 404
    assert len(cluster.get(tokens.format("team"))) == 1
    # Only the admin issues tokens: a project token cannot make more.
    assert httpx.post(f"{cluster.url}{tokens.format('team')}", json={},
                      headers={"Authorization": f"Bearer {chosen}"}, timeout=10).status_code == 401
    refused = corral(cluster, "project", "revoke", "team", "999")
    assert refused.returncode == 1 and "project team has no token 999" in refused.stderr
    bad = cluster.http.post("/api/v1/deployments", json={"name": "x", "command": ["x"], "project": "no spaces"})
    assert bad.status_code == 422 and "project" in bad.text
    assert cluster.get("/api/v1/deployments") == []


def test_a_personal_token_calls_its_projects_deployments_and_a_revoke_holds_at_once_at_every_router(cluster):
    for name, projects in (("alice", {"team-a": "viewer"}), ("bob", {"team-b": "member"})):
        made = cluster.http.post("/api/v1/users", json={"name": name, "projects": projects})
        assert made.status_code == 201, made.text
    alice, bob = (cluster.http.post("/api/v1/tokens", json={"user": name}).json() for name in ("alice", "bob"))
    deploy(cluster, "mine", min_replicas=0, project="team-a")
    with standalone_router(cluster) as router:
        here, far = f"{cluster.url}/serve/mine/whoami", f"{router}/serve/mine/whoami"
        wait_for(lambda: status(far, alice["token"]) == 200, 60, "the standalone router to accept alice's token")
        assert status(here, alice["token"]) == 200
        assert status(here, bob["token"]) == 401 and status(far, bob["token"]) == 401  # not a reader of team-a
        assert cluster.http.delete(f"/api/v1/tokens/{alice['id']}").status_code == 204
        assert status(here, alice["token"]) == 401 and status(far, alice["token"]) == 401  # at once, both
