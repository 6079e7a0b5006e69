"""The retry policy on the command line: submit options, `corral info` and `corral jobs`."""

from __future__ import annotations

import json

import httpx
import pytest
from pydantic import ValidationError

from corral.cli.submit import build_spec, load_spec_file
from corral.client.http import Client
from tests.cli.conftest import job_view


def test_submit_options_build_the_retry_policy(cli, fake):
    result = cli("submit", "--retry-max", "3", "--retry-delay", "30s", "--retry-backoff", "exponential",
                 "--retry-jitter", "none", "--retry-on", "nonzero_exit", "--retry-on", "oom_killed", "--", "train")
    assert result.exit_code == 0, result.output
    policy = fake.submitted[0][0].retry_policy
    assert (policy.max_retries, policy.retry_delay, policy.backoff, policy.jitter, policy.eligible_causes) == (
        3, 30.0, "exponential", "none", ["nonzero_exit", "oom_killed"])
    assert policy.backoff_multiplier is None  # left to the defaults


def test_a_spec_file_policy_is_kept_and_options_override_its_fields(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("command: [train]\nretry_policy: {max_retries: 2, retry_delay: 1m, jitter: random}\n")
    spec = build_spec(load_spec_file(path)[0], retry_max=5)
    assert (spec.retry_policy.max_retries, spec.retry_policy.retry_delay, spec.retry_policy.jitter) == (
        5, 60.0, "random")


def test_a_bad_retry_option_names_its_field():
    with pytest.raises(ValidationError) as raised:
        build_spec(command=("x",), retry_jitter_ratio=3.0)
    assert raised.value.errors()[0]["loc"] == ("retry_policy", "jitter_ratio")


def test_a_cause_that_is_never_retried_is_a_usage_error(cli):
    assert cli("submit", "--retry-on", "user_cancelled", "--", "x").exit_code == 2


def test_info_shows_the_attempt_the_cause_and_the_links(cli, fake, monkeypatch):
    fake.jobs = [job_view(8, state="FAILED", parent_job_id=5, retry_count=1, max_retries=3,
                          retry_cause="nonzero_exit", retry_state="attempt 2 of 4; retried as job 11",
                          retry_chain=[5, 8, 11])]
    result = cli("info", "8")
    assert result.exit_code == 0, result.output
    for text in ("attempt 2 of 4; retried as job 11", "nonzero_exit", "parent", "job 5", "child", "job 11",
                 "5 -> 8 -> 11"):
        assert text in result.output


def test_jobs_marks_retries_and_retried_jobs(cli, fake):
    fake.jobs = [job_view(11, retry_count=2, max_retries=3, retry_chain=[5, 8, 11]),
                 job_view(5, state="FAILED", max_retries=3, retry_chain=[5, 8, 11]),
                 job_view(4, state="FAILED", max_retries=3, retry_chain=[4], retry_due_at=1e9),
                 job_view(3, state="FAILED", retry_chain=[3])]
    lines = cli("jobs").output.splitlines()
    assert "retry 2/3" in lines[1]
    assert "retried" in lines[2] and "retried" in lines[3]
    assert "retr" not in lines[4]


def test_the_python_client_sends_the_policy_and_reads_the_chain():
    sent = []

    def handler(request):
        if request.method == "POST":
            sent.append(json.loads(request.content))
            return httpx.Response(201, json=job_view(5).model_dump(mode="json"))
        assert request.url.path == "/api/v1/jobs/5/attempts"
        return httpx.Response(200, json=[
            {"id": 5, "retry_count": 0, "state": "FAILED", "retry_cause": "oom_killed",
             "retry_state": "attempt 1 of 2; retried as job 6", "created_at": 1.0, "finished_at": 2.0},
            {"id": 6, "retry_count": 1, "state": "RUNNING", "retry_cause": "oom_killed",
             "retry_state": "attempt 2 of 2", "created_at": 3.0, "finished_at": None}])

    api = Client("http://ctl:1", "tok", transport=httpx.MockTransport(handler))
    api.submit({"command": ["train"], "retry_policy": {"max_retries": 1, "retry_delay": "10s"}})
    assert sent[0]["retry_policy"]["max_retries"] == 1 and sent[0]["retry_policy"]["retry_delay"] == 10
    with pytest.raises(ValidationError):  # refused before any request
        api.submit({"command": ["train"], "retry_policy": {"max_retries": -1}})
    assert len(sent) == 1
    assert [(a.id, a.state, a.retry_cause) for a in api.attempts(5)] == [(5, "FAILED", "oom_killed"),
                                                                        (6, "RUNNING", "oom_killed")]
