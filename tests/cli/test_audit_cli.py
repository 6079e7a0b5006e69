"""`corral audit` against a fake controller: the query it sends, a table by default, JSON with --json, and its
bad options refused before any request."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from click.testing import CliRunner

from corral.cli.main import main
from corral.client.http import Client
from corral.core.spec import parse_moment

ROWS = [
    {"id": 2, "at": 1700000100.0, "actor": "alice", "role": "member", "action": "job.cancel", "object": "job 12",
     "job_id": 12, "address": "10.0.0.7", "outcome": 403, "detail": {}},
    {"id": 1, "at": 1700000000.0, "actor": "controller", "role": None, "action": "job.retry_dispatched",
     "object": None, "job_id": 11, "address": None, "outcome": None, "detail": {"attempt": 1}},
]


@pytest.fixture
def asked():
    return []


@pytest.fixture
def run(asked):
    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url)
        return httpx.Response(200, json=ROWS)

    api = Client("http://ctl:1", "tok", transport=httpx.MockTransport(handler))

    def invoke(*args: str):
        return CliRunner().invoke(main, ["audit", *args], obj={"client": api}, catch_exceptions=False)

    return invoke


def test_a_table_by_default(run, asked) -> None:
    result = run()
    assert result.exit_code == 0, result.output
    header, first, second = result.output.splitlines()
    assert header.split() == ["TIME", "USER", "ROLE", "ACTION", "OBJECT", "OUTCOME", "ADDRESS"]
    assert first.split()[2:] == ["alice", "member", "job.cancel", "job", "12", "403", "10.0.0.7"]
    assert second.split()[2:] == ["controller", "-", "job.retry_dispatched", "-", "-", "-"]
    assert asked[0].path == "/api/v1/audit" and dict(asked[0].params) == {"limit": "100"}


def test_json_prints_the_rows_as_the_api_gave_them(run) -> None:
    result = run("--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == ROWS


def test_the_filters_are_sent(run, asked) -> None:
    before = time.time()
    result = run("--user", "alice", "--action", "job.cancel", "--since", "7d", "--until", "2030-01-01T00:00",
                 "--limit", "5")
    assert result.exit_code == 0, result.output
    params = dict(asked[0].params)
    assert (params["user"], params["action"], params["limit"]) == ("alice", "job.cancel", "5")
    assert before - 7 * 86400 - 1 <= float(params["since"]) <= time.time() - 7 * 86400
    assert float(params["until"]) == parse_moment("2030-01-01T00:00", 0.0)


@pytest.mark.parametrize("args", [
    ("--since", "last week"), ("--until", "tomorrow"), ("--since", "1d", "--until", "2d"), ("--limit", "0"),
    ("--limit", "1001"),
])
def test_bad_options_are_usage_errors(run, asked, args) -> None:
    result = CliRunner().invoke(main, ["audit", *args], obj={"client": None})
    assert result.exit_code == 2, result.output
    assert asked == []


def test_a_moment_is_a_duration_back_from_now_or_a_time() -> None:
    assert parse_moment("7d", 1000000.0) == 1000000.0 - 7 * 86400
    assert parse_moment("12h", 100000.0) == 100000.0 - 12 * 3600
    assert parse_moment("1700000000", 0.0) == 1700000000.0
    with pytest.raises(ValueError, match="not a time"):
        parse_moment("soon", 0.0)
