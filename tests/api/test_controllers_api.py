"""GET /api/v1/controllers on one SQLite controller: it lists itself once its row is written, and refuses bad input."""

from __future__ import annotations

from tests.waiting import wait_until


async def test_the_controller_lists_itself_with_its_passes_and_handlers(api) -> None:
    services = api.app.state.services
    await wait_until(lambda: services.engine.last_pass_at, 10, "the engine's first pass")
    await services.registry.refresh()
    async with api.admin() as admin:
        [me] = (await admin.get("/api/v1/controllers")).json()
        assert me["this"] and me["state"] == "live" and me["url"] == "http://127.0.0.1:8265"
        assert me["id"] == services.registry.id and me["last_pass_at"] is not None
        assert [row["id"] for row in (await admin.get("/api/v1/controllers", params={"state": "live"})).json()] == [
            me["id"]]
        assert (await admin.get("/api/v1/controllers", params={"state": "gone"})).json() == []
        refused = await admin.get("/api/v1/controllers", params={"state": "dead"})
        assert refused.status_code == 422 and "live" in refused.text
    async with api.as_("wrong") as stranger:
        assert (await stranger.get("/api/v1/controllers")).status_code == 401
