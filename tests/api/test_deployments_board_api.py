"""The dashboard's deployments board through the API: any signed-in user reads it, seeing the deployments of the
projects they may read (it answered a member 401, which signed them out of the dashboard)."""

from __future__ import annotations

from tests.api.conftest import api as api  # noqa: F401 (the fixture)
from tests.controller.test_roles import Team, _ok

BOARD = "/api/v1/overview/deployments"


async def test_members_read_the_board_of_their_projects_only(api):  # noqa: F811
    team = await Team(api).build()  # bob's deployment "bobs" is in project vision
    async with api.admin() as admin:
        await _ok(admin.post("/api/v1/users", json={"name": "eve", "projects": {"audio": "member"}}), 201)
        eve_token = (await _ok(admin.post("/api/v1/tokens", json={"user": "eve"}), 201))["token"]
    async with team.as_("view") as viewer, api.as_(eve_token) as eve, team.as_("root") as root:
        assert [d["name"] for d in (await _ok(viewer.get(BOARD)))["deployments"]] == ["bobs"]
        assert (await _ok(eve.get(BOARD)))["deployments"] == []
        assert [d["name"] for d in (await _ok(root.get(BOARD)))["deployments"]] == ["bobs"]
    async with api.as_("no-such-token") as stranger:
        assert (await stranger.get(BOARD)).status_code == 401
