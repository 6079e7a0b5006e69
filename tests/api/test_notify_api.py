"""Notifications through the API: a job's notify URL checked at the edge, a project's default set by its admins
and read by its members, and the webhook secret a cluster admin's alone."""

from __future__ import annotations

import pytest

from tests.api.conftest import api as api  # noqa: F401 (the fixture)
from tests.controller.test_roles import PROJECT, Team, _ok
from tests.unit.test_webhooks import BAD

NOTIFY = f"/api/v1/admin/projects/{PROJECT}/notify"


@pytest.fixture
async def team(api):  # noqa: F811
    return await Team(api).build()


async def test_a_jobs_notify_url_is_kept_and_a_bad_one_refused_with_422(api):  # noqa: F811
    async with api.admin() as admin:
        job = await _ok(admin.post("/api/v1/jobs", json={"command": ["true"], "notify": "https://h.test/x"}), 201)
        assert (await _ok(admin.get(f"/api/v1/jobs/{job['id']}")))["spec"]["notify"] == "https://h.test/x"
        for url in BAD:
            refused = await admin.post("/api/v1/jobs", json={"command": ["true"], "notify": url})
            assert refused.status_code == 422, url
            assert "notify" in refused.text


async def test_a_projects_admin_sets_its_default_and_its_members_read_it(team):
    async with team.as_("mem") as mem, team.as_("pa") as pa, team.as_("view") as viewer:
        assert (await mem.get(NOTIFY)).status_code == 404
        assert (await mem.put(NOTIFY, json={"url": "https://h.test/m"})).status_code == 403
        assert await _ok(pa.put(NOTIFY, json={"url": "https://h.test/vision"})) == {"url": "https://h.test/vision"}
        assert await _ok(viewer.get(NOTIFY)) == {"url": "https://h.test/vision"}
        assert (await mem.delete(NOTIFY)).status_code == 403
    async with team.as_("root") as root:
        assert await _ok(root.get("/api/v1/admin/notify/projects")) == {PROJECT: "https://h.test/vision"}
    async with team.as_("pa") as pa:
        await _ok(pa.delete(NOTIFY), 204)
        assert (await pa.delete(NOTIFY)).status_code == 404


@pytest.mark.parametrize("body", [{"url": "none"}, {"url": "ftp://h.test/"}, {"url": "https://u:p@h.test/"},
                                  {}, {"url": "https://h.test/", "extra": 1}, {"url": 5}])
async def test_a_bad_project_default_is_refused_with_422(api, body):  # noqa: F811
    async with api.admin() as admin:
        assert (await admin.put(NOTIFY, json=body)).status_code == 422
        assert (await admin.put("/api/v1/admin/projects/bad name/notify", json={"url": "https://h/"})).status_code \
            == 422


async def test_the_secret_is_a_cluster_admins_and_rotates(team):
    async with team.as_("pa") as pa:
        assert (await pa.get("/api/v1/admin/notify/secret")).status_code == 403
        assert (await pa.post("/api/v1/admin/notify/secret")).status_code == 403
    async with team.as_("root") as root:
        first = (await _ok(root.get("/api/v1/admin/notify/secret")))["secret"]
        assert (await _ok(root.get("/api/v1/admin/notify/secret")))["secret"] == first
        rotated = (await _ok(root.post("/api/v1/admin/notify/secret")))["secret"]
        assert rotated != first and (await _ok(root.get("/api/v1/admin/notify/secret")))["secret"] == rotated
