"""The retry API in process: policies on submission, the chain's fields, /attempts, the admin defaults."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from corral.cli.main import main
from corral.controller.app import create_app
from corral.controller.settings import ControllerSettings
from corral.core.config import parse_config
from tests.waiting import wait_for


@pytest.fixture
def api(tmp_path):
    with TestClient(create_app(ControllerSettings(data_dir=tmp_path, admin_token="t"))) as client:
        client.headers["Authorization"] = "Bearer t"
        yield client


def submit(api, **spec):
    response = api.post("/api/v1/jobs", json={"command": ["true"], **spec})
    assert response.status_code == 201, response.text
    return response.json()


@pytest.mark.parametrize(("policy", "field"), [
    ({"max_retries": -1}, "max_retries"),
    ({"retry_delay": "later"}, "retry_delay"),
    ({"backoff": "linear"}, "backoff"),
    ({"jitter_ratio": 2}, "jitter_ratio"),
    ({"eligible_causes": ["user_cancelled"]}, "eligible_causes"),
])
def test_a_bad_policy_is_refused_naming_the_field_and_nothing_is_stored(api, policy, field):
    response = api.post("/api/v1/jobs", json={"command": ["true"], "retry_policy": policy})
    assert response.status_code == 422
    assert [e["loc"][:3] for e in response.json()["detail"]] == [["body", "retry_policy", field]]
    assert api.get("/api/v1/jobs").json()["items"] == []


def test_a_job_shows_its_policy_in_effect_and_its_place_in_the_chain(api):
    job = submit(api, retry_policy={"max_retries": 3, "retry_delay": "30s", "backoff": "exponential"})
    assert (job["max_retries"], job["retry_count"], job["parent_job_id"], job["retry_chain"]) == (
        3, 0, None, [job["id"]])
    assert job["retry_state"] == "attempt 1 of 4"
    assert job["retry_policy"]["retry_delay"] == 30 and job["retry_policy"]["jitter"] == "deterministic"
    assert job["spec"]["retry_policy"]["backoff_multiplier"] is None  # as written: inherited
    (attempt,) = api.get(f"/api/v1/jobs/{job['id']}/attempts").json()
    assert (attempt["id"], attempt["retry_count"], attempt["retry_state"]) == (job["id"], 0, "attempt 1 of 4")


def test_a_job_without_a_policy_has_none(api):
    job = submit(api)
    assert (job["max_retries"], job["retry_policy"], job["retry_state"]) == (0, None, None)


def test_attempts_of_an_unknown_job_is_a_404(api):
    response = api.get("/api/v1/jobs/999/attempts")
    assert response.status_code == 404 and response.json()["detail"] == "no job 999"


def test_the_cluster_and_project_defaults_apply_to_new_jobs(api):
    assert api.get("/api/v1/admin/retry-policy").json()["effective"]["max_retries"] == 0
    bad = api.put("/api/v1/admin/retry-policy", json={"backoff_multiplier": 0})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "backoff_multiplier"]
    stored = api.put("/api/v1/admin/retry-policy", json={"max_retries": 2, "retry_delay": 5}).json()
    assert (stored["scope"], stored["policy"]["max_retries"], stored["effective"]["retry_delay"]) == ("cluster", 2, 5)
    api.put("/api/v1/admin/projects/vision/retry-policy", json={"retry_delay": 9})
    assert api.get("/api/v1/admin/projects/vision/retry-policy").json()["effective"]["max_retries"] == 2
    assert submit(api)["retry_policy"]["retry_delay"] == 5
    assert submit(api, project="vision")["retry_policy"]["retry_delay"] == 9
    assert submit(api, project="vision", retry_policy={"retry_delay": 1})["retry_policy"]["retry_delay"] == 1
    api.delete("/api/v1/admin/retry-policy")
    assert submit(api)["max_retries"] == 0


def test_the_config_file_sets_the_cluster_default_under_the_admin_one(tmp_path):
    config = parse_config("retry_policy:\n  max_retries: 4\n  retry_delay: 2m\n", "corral.yaml")
    settings = ControllerSettings(data_dir=tmp_path / "data", admin_token="t", config=config)
    with TestClient(create_app(settings)) as api:
        api.headers["Authorization"] = "Bearer t"
        view = api.get("/api/v1/admin/retry-policy").json()
        assert view["policy"] is None and (view["effective"]["max_retries"], view["effective"]["retry_delay"]) == (
            4, 120)
        api.put("/api/v1/admin/retry-policy", json={"max_retries": 1})
        assert submit(api)["retry_policy"]["retry_delay"] == 120
        assert submit(api)["max_retries"] == 1


def test_a_bad_config_file_stops_the_controller_naming_the_field(tmp_path):
    config = tmp_path / "corral.yaml"
    config.write_text("retry_policy:\n  jitter: sometimes\n")
    result = CliRunner().invoke(main, ["controller", "--data-dir", str(tmp_path / "data"), "--config", str(config)])
    assert result.exit_code == 2 and f"{config}: retry_policy.jitter: " in result.output


def test_cancelling_an_ended_job_stops_its_scheduled_retry(api):
    """No worker: the job is not placed within its scheduling timeout, which schedules a retry an hour away."""
    job = submit(api, scheduling_timeout=0.1, retry_policy={"max_retries": 2, "retry_delay": "1h"})
    scheduled = wait_for(lambda: (j := api.get(f"/api/v1/jobs/{job['id']}").json())["retry_due_at"] and j)
    assert (scheduled["state"], scheduled["retry_cause"]) == ("UNSCHEDULABLE", "scheduler_timeout")
    assert scheduled["retry_state"].startswith("retry scheduled at ")
    response = api.post(f"/api/v1/jobs/{job['id']}/cancel")
    assert response.status_code == 200, response.text
    assert response.json()["retry_state"] == "attempt 1 of 3; not retried"
    again = api.post(f"/api/v1/jobs/{job['id']}/cancel")
    assert again.status_code == 409 and "already ended UNSCHEDULABLE" in again.json()["detail"]
    history = api.get(f"/api/v1/jobs/{job['id']}/history").json()
    assert history[-1]["message"] == "its scheduled retry was cancelled by a user"
