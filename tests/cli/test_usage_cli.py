"""`corral usage`: a table with a TOTAL row, --json and --csv, from the API's report."""

from __future__ import annotations

import csv
import io
import json

import httpx
import pytest

from corral.client.http import Client
from corral.core.config import PoolPrices
from corral.core.usage import GIB, HOUR, UsageBy, UsageSums, report

SUMS = [UsageSums(key="nlp", pool="default", attempts=3, cpu_seconds=2 * HOUR, memory_byte_seconds=0.0,
                  gpu_seconds=0.0),
        UsageSums(key="vision", pool="default", attempts=2, cpu_seconds=HOUR, memory_byte_seconds=4 * GIB * HOUR,
                  gpu_seconds=0.5 * HOUR),
        UsageSums(key="vision", pool="a100", attempts=1, cpu_seconds=HOUR, memory_byte_seconds=0.0,
                  gpu_seconds=HOUR)]
PRICES = {"default": PoolPrices(cpu_hour=1.0, gpu_hour=2.0), "a100": PoolPrices(gpu_hour=4.0)}


@pytest.fixture
def usage_client(fake):
    asked = []

    def usage(since=None, until=None, by="project"):
        asked.append((since, until, by))
        return report(0.0, 100.0, UsageBy(by), SUMS, PRICES)

    fake.usage = usage
    return asked


def test_the_table_has_a_row_per_key_and_a_total(cli, usage_client):
    result = cli("usage", "--since", "7d", "--by", "project")
    assert result.exit_code == 0, result.output
    assert usage_client == [("7d", None, "project")]
    lines = [line.split() for line in result.output.splitlines()]
    assert lines[0] == ["PROJECT", "ATTEMPTS", "CPU-HOURS", "MEM-GIB-HOURS", "GPU-HOURS", "COST", "(USD)"]
    assert lines[1] == ["nlp", "3", "2.00", "0.00", "0.00", "2.00"]
    assert lines[2] == ["vision", "3", "2.00", "4.00", "1.50", "6.00"]  # 1 + 0.5 * 2 + 1 * 4
    assert lines[-1] == ["TOTAL", "6", "4.00", "4.00", "1.50", "8.00"]


def test_json_is_the_report_with_its_totals(cli, usage_client):
    result = cli("usage", "--json", "--by", "pool", "--until", "2026-01-31")
    body = json.loads(result.output)
    assert usage_client == [("30d", "2026-01-31", "pool")]
    assert body["totals"]["attempts"] == sum(row["attempts"] for row in body["rows"]) == 6
    assert body["totals"]["cost"] == sum(row["cost"] for row in body["rows"]) == 8.0
    assert body["currency"] == "USD"


def test_csv_has_a_total_row_that_adds_up(cli, usage_client):
    rows = list(csv.DictReader(io.StringIO(cli("usage", "--csv", "--by", "user").output)))
    assert [row["user"] for row in rows] == ["nlp", "vision", "TOTAL"]
    for field in ("attempts", "cpu_seconds", "memory_byte_seconds", "gpu_seconds", "cost"):
        assert float(rows[-1][field]) == sum(float(row[field]) for row in rows[:-1])


def test_an_unknown_grouping_is_a_usage_error(cli, usage_client):
    result = cli("usage", "--by", "team")
    assert result.exit_code == 2 and "team" in result.output
    assert usage_client == []


def test_the_client_asks_for_the_window_and_grouping_and_reads_the_report():
    seen = []
    body = report(0.0, 100.0, UsageBy.USER, SUMS, {}).model_dump(mode="json")

    def handler(request):
        seen.append((request.url.path, dict(request.url.params)))
        return httpx.Response(200, json=body)

    found = Client("http://ctl:1", "tok", transport=httpx.MockTransport(handler)).usage("30d", None, "user")
    assert seen == [("/api/v1/usage", {"by": "user", "since": "30d"})]
    assert found.totals.attempts == 6 and found.totals.cost is None and found.currency is None
