"""End to end: job webhooks from a real controller and worker to a real HTTP receiver on 127.0.0.1, signed, retried
and sent to the project's default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from corral.core.webhooks import signature
from tests.e2e.cluster import Cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e
FAILS_FIRST = 2  # tries of each delivery to /flaky answered 500


class Receiver(ThreadingHTTPServer):
    """Keeps every POST (path, headers, body, answer); /flaky answers 500 to a delivery's first two tries."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.seen: list[tuple[str, dict[str, str], bytes, int]] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def posts(self, path: str) -> list[tuple[dict[str, str], dict]]:
        """The POSTs to `path` that were answered 200: headers, parsed body."""
        return [(headers, json.loads(body)) for headers, body in self.raw(path)]

    def raw(self, path: str) -> list[tuple[dict[str, str], bytes]]:
        with self.lock:
            return [(headers, body) for at, headers, body, answer in self.seen if at == path and answer == 200]


class Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        headers = dict(self.headers.items())
        with self.server.lock:
            earlier = sum(1 for at, seen, _, _ in self.server.seen
                          if at == self.path and seen["X-Corral-Delivery"] == headers["X-Corral-Delivery"])
            answer = 500 if self.path == "/flaky" and earlier < FAILS_FIRST else 200
            self.server.seen.append((self.path, headers, body, answer))
        self.send_response(answer)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def notifying(tmp_path_factory) -> Iterator[Cluster]:
    """A controller whose webhook retries wait 0.2 s, 0.6 s ... (not 10 s, 30 s ...) and reach loopback (the
    receiver's), and one worker."""
    running = Cluster(tmp_path_factory.mktemp("notify"),
                      controller_args=("--notify-backoff", "0.2s", "--notify-allow", "127.0.0.1"))
    running.start_controller()
    running.start_worker("w1")
    yield running
    running.stop()


def corral(cluster: Cluster, *args: str) -> str:
    env = {**os.environ, "CORRAL_URL": cluster.url, "CORRAL_TOKEN": cluster.admin_token}
    result = subprocess.run([sys.executable, "-m", "corral", *args], capture_output=True, text=True, env=env,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def events_of(receiver: Receiver, path: str, job_id: int) -> list[str]:
    return [body["event"] for _, body in receiver.posts(path) if body["job"]["id"] == job_id]


def test_jobs_post_signed_starts_and_ends_to_their_url_or_their_projects(notifying, receiver):
    job_id = int(corral(notifying, "submit", "--notify", f"{receiver.url}/hook", "--", "true"))
    failing = notifying.submit(command=["false"], notify=f"{receiver.url}/hook")
    corral(notifying, "project", "notify", "vision", f"{receiver.url}/vision")
    by_default = notifying.submit(command=["true"], project="vision")
    opted_out = notifying.submit(command=["true"], project="vision", notify="none")
    wait_for(lambda: events_of(receiver, "/hook", job_id) == ["job.started", "job.succeeded"], 30,
             f"job {job_id}'s start and end to be posted")
    wait_for(lambda: events_of(receiver, "/hook", failing)[-1:] == ["job.failed"], 30, "the failure to be posted")
    wait_for(lambda: events_of(receiver, "/vision", by_default)[-1:] == ["job.succeeded"], 30,
             "the project's default to be posted to")
    assert notifying.wait_end(opted_out)["state"] == "SUCCEEDED"
    secret = corral(notifying, "notify", "secret")
    for headers, raw in receiver.raw("/hook") + receiver.raw("/vision"):
        assert headers["X-Corral-Signature"] == signature(secret, int(headers["X-Corral-Timestamp"]), raw)
        body = json.loads(raw)
        assert headers["X-Corral-Event"] == body["event"] and headers["X-Corral-Delivery"] == str(body["delivery"])
    assert events_of(receiver, "/vision", opted_out) == []
    assert [body["job"]["state"] for _, body in receiver.posts("/hook") if body["job"]["id"] == job_id] == \
        ["RUNNING", "SUCCEEDED"]


def test_a_receiver_that_fails_twice_gets_each_delivery_on_the_third_try(notifying, receiver):
    job_id = notifying.submit(command=["true"], notify=f"{receiver.url}/flaky")
    wait_for(lambda: events_of(receiver, "/flaky", job_id) == ["job.started", "job.succeeded"], 30,
             "both notifications to get through")
    with receiver.lock:
        tries = [(headers["X-Corral-Delivery"], answer) for at, headers, body, answer in receiver.seen
                 if at == "/flaky" and json.loads(body)["job"]["id"] == job_id]
    deliveries = sorted({delivery for delivery, _ in tries})
    assert len(deliveries) == 2
    assert sorted(tries) == sorted((delivery, answer) for delivery in deliveries for answer in (500, 500, 200))
