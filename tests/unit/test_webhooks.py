"""Job webhooks' pure rules: which events notify, the body and its signature, the retry schedule, the URL check."""

from __future__ import annotations

import json
import random
import re
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from corral.client.functions import function_spec
from corral.core.estimates import moved_message, moved_parts
from corral.core.spec import JobSpec
from corral.core.webhooks import (
    JITTER,
    MAX_TRIES,
    JobFacts,
    ProjectNotify,
    body_bytes,
    check_url,
    chosen_url,
    content,
    headers,
    notification,
    parse_network,
    refusal,
    retry_delay,
    signature,
)

DOCS = Path(__file__).parents[2] / "docs" / "notifications.md"
JOB = JobFacts(id=17, name="train", state="FAILED", project="vision", user="alice")


def test_the_signature_is_the_hmac_of_timestamp_dot_body():
    # openssl: printf '1700000000.{"event":"job.started"}' | openssl dgst -sha256 -hmac test-secret
    assert signature("test-secret", 1700000000, b'{"event":"job.started"}') == \
        "sha256=cdb58f9f6ee860379b6501a111e0a625495842a7d86ab007c76443be981c0e1a"


def test_the_body_names_the_event_the_job_and_the_delivery():
    body = json.loads(body_bytes(content("job.failed", JOB, 12.5, "task 0 exited with code 1"), 42))
    assert body == {"event": "job.failed", "at": 12.5, "message": "task 0 exited with code 1", "delivery": 42,
                    "job": {"id": 17, "name": "train", "state": "FAILED", "project": "vision", "user": "alice"}}


def test_an_estimate_move_carries_both_estimates():
    body = content("job.estimate_moved", JOB, 1.0, moved_message("~4m", "unknown: no worker is alive; waiting for one "
                                                                "to register"))
    assert body["estimate"] == {"before": "~4m", "after": "unknown: no worker is alive; waiting for one to register"}
    assert moved_parts("something else") == {"before": None, "after": None}


def test_the_headers_sign_what_is_sent():
    body = body_bytes(content("job.started", JOB, 1.0, None), 7)
    sent = headers("s3cret", 1700000000, body, "job.started", 7, "1.2.3")
    assert sent["X-Corral-Signature"] == signature("s3cret", 1700000000, body)
    assert (sent["Content-Type"], sent["User-Agent"], sent["X-Corral-Event"], sent["X-Corral-Delivery"],
            sent["X-Corral-Timestamp"]) == ("application/json", "corral/1.2.3", "job.started", "7", "1700000000")


def test_the_docs_receiver_accepts_a_signed_body_and_refuses_a_changed_or_old_one():
    block = re.search(r"## Checking the signature.*?```python\n(.*?)```", DOCS.read_text(), re.S)
    namespace: dict = {}
    exec(block[1], namespace)  # noqa: S102 - the docs' own example, run as a reader would
    verify = namespace["verify"]
    body = body_bytes(content("job.started", JOB, 1.0, None), 7)
    now = int(time.time())
    sent = headers("s3cret", now, body, "job.started", 7, "1")
    assert verify("s3cret", sent, body)
    assert not verify("s3cret", sent, body.replace(b"train", b"train2"))
    assert not verify("other", sent, body)
    old = headers("s3cret", now - 3600, body, "job.started", 7, "1")
    assert not verify("s3cret", old, body)


@pytest.mark.parametrize(("kind", "to_state", "event_type", "expected"), [
    ("job", "RUNNING", "job.state_changed", "job.started"),
    ("job", "SUCCEEDED", "job.state_changed", "job.succeeded"),
    ("job", "FAILED", "job.state_changed", "job.failed"),
    ("job", "CANCELLED", "job.state_changed", "job.ended"),
    ("job", "UNSCHEDULABLE", "job.state_changed", "job.ended"),
    ("job", "LOST", "job.state_changed", "job.ended"),
    ("job", None, "job.estimate_moved", "job.estimate_moved"),
    ("job", "SCHEDULED", "job.state_changed", None),
    ("job", "TERMINATING", "job.state_changed", None),
    ("job", None, "job.submitted", None),
    ("task", "RUNNING", "task.state_changed", None),
    ("job", None, "job.notification_gave_up", None),
])
def test_which_rows_notify(kind, to_state, event_type, expected):
    assert notification(kind, to_state, event_type) == expected


def test_the_jobs_url_wins_and_none_opts_out():
    assert chosen_url("http://a/", "http://p/") == "http://a/"
    assert chosen_url(None, "http://p/") == "http://p/"
    assert chosen_url("none", "http://p/") is None
    assert chosen_url(None, None) is None


def test_the_retry_schedule_without_jitter_spans_about_an_hour():
    middle = random.Random()
    middle.random = lambda: 0.5  # no jitter
    waits = [retry_delay(tries, rng=middle) for tries in range(1, MAX_TRIES)]
    assert waits == [10, 30, 90, 270, 810, 1200, 1200]
    assert retry_delay(MAX_TRIES) is None
    assert 3000 < sum(waits) < 4000


@given(st.integers(1, MAX_TRIES - 1), st.floats(0.01, 100), st.integers(0, 2**32))
def test_jitter_stays_within_its_fraction(tries, base, seed):
    plain = base * min(3 ** (tries - 1), 120)
    delay = retry_delay(tries, base, random.Random(seed))
    assert plain * (1 - JITTER) <= delay <= plain * (1 + JITTER)


GOOD = ["http://127.0.0.1:8080/hook", "https://hooks.example.com/corral?token=abc", "https://[::1]/x", "none"]
BAD = {
    "ftp://example.com/hook": "http:// or https://",
    "example.com/hook": "http:// or https://",
    "javascript:alert(1)": "http:// or https://",
    "http://": "names no host",
    "http:///path": "names no host",
    "https://user:pass@example.com/": "credentials",
    "https://user@example.com/": "credentials",
    "http://example.com:notaport/": "not a URL",
    "http://example.com/a b": "space",
    "http://example.com/\x00": "control",
    "http://[::1/": "not a URL",
    "https://example.com/" + "a" * 2048: "at most 2048",
    "": "http:// or https://",
}


@pytest.mark.parametrize("url", GOOD)
def test_good_urls_are_kept(url):
    assert check_url(url) == url
    assert JobSpec(command=["true"], notify=url).notify == url


@pytest.mark.parametrize(("url", "said"), BAD.items())
def test_every_bad_url_is_refused_saying_why(url, said):
    with pytest.raises(ValueError, match=re.escape(said)):
        check_url(url)
    with pytest.raises(ValidationError):
        JobSpec(command=["true"], notify=url)
    with pytest.raises(ValidationError):
        ProjectNotify(url=url)


def test_a_project_default_cannot_be_none():
    with pytest.raises(ValidationError, match="opts a job out"):
        ProjectNotify(url="none")


def test_the_python_api_takes_notify_as_an_option():
    spec = function_spec(print, "0" * 64, None, None, {"notify": "https://hooks.example.com/x"})
    assert spec.notify == "https://hooks.example.com/x"


REFUSED = {
    "127.0.0.1": "loopback", "127.8.9.10": "loopback", "::1": "loopback", "10.1.2.3": "private",
    "172.16.0.9": "private", "192.168.1.1": "private", "fd00::5": "private", "169.254.169.254": "link-local",
    "fe80::1%eth0": "link-local", "100.64.0.1": "non-public", "0.0.0.0": "private", "224.0.0.1": "non-public",
    "::ffff:10.0.0.1": "private", "::ffff:127.0.0.1": "loopback", "240.0.0.1": "private",
}


@pytest.mark.parametrize(("address", "kind"), REFUSED.items())
def test_addresses_that_are_not_public_are_refused_saying_what_they_are(address, kind):
    said = refusal(address, ())
    assert said is not None and f"a {kind} address" in said and "--notify-allow" in said


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8"])
def test_public_addresses_are_reached(address):
    assert refusal(address, ()) is None


def test_the_admin_lets_networks_through():
    allowed = (parse_network("10.20.0.0/16"), parse_network("127.0.0.1"), parse_network("::1"))
    assert refusal("10.20.3.4", allowed) is None and refusal("::ffff:10.20.3.4", allowed) is None
    assert refusal("127.0.0.1", allowed) is None and refusal("::1", allowed) is None
    assert refusal("10.21.0.1", allowed) is not None and refusal("127.0.0.2", allowed) is not None


@pytest.mark.parametrize("text", ["10.0.0.0/33", "example.com", "", "10.0.0.1/8/2", "::g"])
def test_a_bad_network_is_refused_saying_what_one_looks_like(text):
    with pytest.raises(ValueError, match="is not an IP network"):
        parse_network(text)
