"""End to end in a real headless Chromium: the Usage page charts what two projects' jobs used per day, and its
table adds them up, with their cost at the config's prices."""

from __future__ import annotations

import pytest

from tests.e2e.browser import screenshot
from tests.e2e.cluster import Cluster
from tests.e2e.test_dashboard import browser, corral, page  # noqa: F401 (browser, page: fixtures)

pytestmark = pytest.mark.e2e
PRICES = "prices:\n  default: {cpu_hour: 3600, currency: EUR}\n"  # a core-second costs 1


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    root = tmp_path_factory.mktemp("usage")
    (root / "corral.yaml").write_text(PRICES)
    cluster = Cluster(root)
    cluster.start_controller("--config", str(root / "corral.yaml"))
    cluster.start_worker("w1")
    yield cluster
    cluster.stop()


def test_the_usage_page_charts_each_projects_use_per_day_and_totals_it(page, live):  # noqa: F811
    jobs = [int(corral(live, "submit", "--project", project, "--cpus", "2", "--", "sleep", "1"))
            for project in ("vision", "nlp")]
    for job_id in jobs:
        assert live.wait_end(job_id)["state"] == "SUCCEEDED"
    page.get_by_role("link", name="Usage").click()
    chart = page.locator("svg[data-usage-chart]")
    chart.wait_for()
    for project in ("vision", "nlp"):
        assert chart.locator(f'rect[data-project="{project}"]').count() == 1  # one day, one bar segment each
        page.locator(f'table[aria-label="usage by project"] tr[data-key="{project}"]').wait_for()
    total = page.locator('tr[data-key="TOTAL"] td').all_inner_texts()
    assert total[0] == "2" and total[-1].endswith("EUR")
    assert float(total[-1].split()[0]) >= 4  # two jobs, 2 cores each, at least a second each

    page.get_by_label("Table by").select_option("user")
    page.locator('table[aria-label="usage by user"] tr[data-key="admin"]').wait_for()
    page.get_by_label("Chart").select_option("cost")
    page.locator("#usage-chart-title").filter(has_text="cost per day").wait_for()
    screenshot(page, "usage")
