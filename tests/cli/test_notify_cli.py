"""`corral submit --notify`, `corral project notify` and `corral notify secret` against a fake client."""

from __future__ import annotations

import json

import pytest

from tests.unit.test_webhooks import BAD


def test_submit_notify_sets_the_spec_and_none_opts_out(cli, fake):
    assert cli("submit", "--notify", "https://h.test/x", "--", "true").exit_code == 0
    assert cli("submit", "--notify", "none", "--", "true").exit_code == 0
    assert [spec.notify for spec, _ in fake.submitted] == ["https://h.test/x", "none"]


@pytest.mark.parametrize("url", [url for url in BAD if url and "\x00" not in url])
def test_a_bad_notify_url_is_one_error_line(cli, fake, url):
    result = cli("submit", "--notify", url, "--", "true")
    assert result.exit_code == 1 and result.output.startswith("error: invalid job spec: notify")
    assert len(result.output.strip().splitlines()) == 1 and not fake.submitted


def _answering(fake, reply):
    fake.asked = []

    def answer(method, path, **kwargs):
        fake.asked.append((method, path, kwargs.get("json")))
        return reply

    fake._json = answer


def test_project_notify_sets_shows_and_lists(cli, fake):
    _answering(fake, {"url": "https://h.test/v"})
    assert "https://h.test/v" in cli("project", "notify", "vision", "https://h.test/v").output
    assert json.loads(cli("project", "notify", "vision", "--json").output) == {"vision": "https://h.test/v"}
    assert fake.asked == [("PUT", "/api/v1/admin/projects/vision/notify", {"url": "https://h.test/v"}),
                          ("GET", "/api/v1/admin/projects/vision/notify", None)]
    _answering(fake, {"vision": "https://h.test/v", "audio": "http://a.test/"})
    listed = cli("project", "notify").output
    assert "vision" in listed and "http://a.test/" in listed


@pytest.mark.parametrize("url", ["none", "ftp://h.test/", "https://u:p@h.test/"])
def test_a_bad_project_default_is_one_error_line_and_never_sent(cli, fake, url):
    _answering(fake, {})
    result = cli("project", "notify", "vision", url)
    assert result.exit_code == 1 and result.output.startswith("error: invalid notify URL: url")
    assert len(result.output.strip().splitlines()) == 1 and fake.asked == []


def test_clear_with_a_url_is_a_usage_error(cli, fake):
    _answering(fake, {})
    assert cli("project", "notify", "vision", "https://h.test/", "--clear").exit_code == 2 and fake.asked == []


def test_notify_secret_reads_and_rotates(cli, fake):
    _answering(fake, {"secret": "ab" * 32})
    assert cli("notify", "secret").output.strip() == "ab" * 32
    assert cli("notify", "secret", "--rotate").exit_code == 0
    assert [method for method, _, _ in fake.asked] == ["GET", "POST"]


def test_project_notify_clear_deletes_the_default(cli, fake):
    _answering(fake, {})
    fake.request = lambda method, path, **kwargs: fake.asked.append((method, path, None))
    assert cli("project", "notify", "vision", "--clear").output == "vision: no default notify URL\n"
    assert fake.asked == [("DELETE", "/api/v1/admin/projects/vision/notify", None)]
