"""The job list filters on a job's project and pool (the dashboard's Project and Pool filters)."""

from __future__ import annotations


async def test_the_job_list_filters_by_project_and_pool(api):
    async with api.admin() as admin:
        ids = {}
        for name, project, pool in (("a", "vision", "gpu"), ("b", "vision", "default"), ("c", "default", "gpu")):
            response = await admin.post("/api/v1/jobs", json={"command": ["true"], "name": name, "project": project,
                                                              "pool": pool})
            ids[name] = response.json()["id"]

        async def names(**params) -> tuple[list[str], int]:
            response = await admin.get("/api/v1/jobs", params={**params, "count": "true", "sort": "name",
                                                               "order": "asc"})
            assert response.status_code == 200, response.text
            return [j["name"] for j in response.json()["items"]], response.json()["total"]

        assert await names(project="vision") == (["a", "b"], 2)
        assert await names(pool="gpu") == (["a", "c"], 2)
        assert await names(project="vision", pool="gpu") == (["a"], 1)
        assert await names(project="nobody") == ([], 0)
        assert await names(pool="default", state="PENDING") == (["b"], 1)
