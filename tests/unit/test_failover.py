"""Several controllers: the URL list, the sticky rotation, the jittered delay, and the clients' resend rules
against fake controllers (httpx.MockTransport)."""

from __future__ import annotations

import random
import re
import threading

import httpx
import pytest

from corral.client.aio import AsyncClient
from corral.client.discovery import discover
from corral.client.errors import CorralError, Unanswered
from corral.client.http import Client, resendable
from corral.core.backoff import failover_delay
from corral.core.failover import Rotation, parse_urls

A, B = "http://a:1", "http://b:2"
PATH = "/api/v1/jobs/7"


def test_urls_are_split_trimmed_and_each_checked():
    assert parse_urls(" http://a:1/ , https://b ") == ["http://a:1", "https://b"]
    for text, said in [("", "no controller URL"), ("http://a,", "an empty controller URL"),
                       ("a:1", "is not http(s)://host[:port]"), ("ftp://a", "is not http(s)://host[:port]"),
                       ("http://a/api", "more than http(s)://host[:port]"), ("http://a:x", "'http://a:x'"),
                       ("http://a,http://a", "appears twice")]:
        with pytest.raises(ValueError, match=re.escape(said)):
            parse_urls(text)


def test_the_rotation_sticks_to_the_url_that_works_and_moves_on_once_per_failure():
    rotation = Rotation([A, B, "http://c:3"])
    assert rotation.failed(A) == B
    assert rotation.failed(A) == B  # another caller saw the same failure: no second move
    assert rotation.failed(B) == "http://c:3" and rotation.failed("http://c:3") == A


def test_the_failover_delay_doubles_with_jitter_up_to_its_cap():
    rng = random.Random(1)
    for failures in range(10):
        base = min(0.2 * 2 ** failures, 5.0)
        assert base <= failover_delay(failures, 0.2, 5.0, rng) <= min(base * 1.5, 5.0)
    assert failover_delay(40, 0.2, 5.0, rng) == 5.0


def test_only_requests_never_sent_reads_and_keyed_writes_are_resent():
    refused = Unanswered("refused", sent=False)
    cut = Unanswered("reset", sent=True)
    assert resendable("POST", {}, refused)
    assert resendable("GET", {}, cut) and resendable("get", None, None)
    assert not resendable("POST", {}, cut) and not resendable("POST", {}, None)
    assert resendable("POST", {"Idempotency-Key": "k"}, cut)


def test_corral_url_with_two_controllers_is_discovered_and_a_bad_one_is_one_error_line():
    assert discover({"CORRAL_URL": f"{A},{B}", "CORRAL_TOKEN": "t"}).url == f"{A},{B}"
    with pytest.raises(CorralError, match="'ftp://b' is not http"):
        Client(f"{A},ftp://b", "t")


def controllers(seen: list[str], down: set[str], answer=None) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        origin = f"{request.url.scheme}://{request.url.host}:{request.url.port}"
        seen.append(f"{request.method} {origin}")
        if origin in down:
            raise httpx.ConnectError("refused", request=request)
        return answer(request, origin) if answer else httpx.Response(200, json={"id": 7})
    return httpx.MockTransport(handler)


def test_a_read_goes_to_the_next_controller_and_stays_there():
    seen: list[str] = []
    client = Client(f"{A},{B}", "t", transport=controllers(seen, {A}))
    assert client.request("GET", PATH).json() == client.request("GET", PATH).json() == {"id": 7}
    assert seen == [f"GET {A}", f"GET {B}", f"GET {B}"] and client.url == B


def test_with_every_controller_down_the_error_names_the_last_one_tried():
    client = Client(f"{A},{B}", "t", transport=controllers([], {A, B}))
    with pytest.raises(CorralError, match=f"cannot reach the controller at {B}"):
        client.request("GET", PATH)


def test_a_503_read_is_retried_on_the_next_controller_but_a_write_without_a_key_is_not():
    seen: list[str] = []

    def busy_a(request: httpx.Request, origin: str) -> httpx.Response:
        return httpx.Response(503, json={"detail": "busy"}) if origin == A else httpx.Response(200, json={"id": 7})

    client = Client(f"{A},{B}", "t", transport=controllers(seen, set(), busy_a))
    assert client.request("GET", PATH).json() == {"id": 7}
    client._controllers.failed(B)  # back to A
    with pytest.raises(CorralError, match="busy"):
        client.request("POST", f"{PATH}/cancel")  # no Idempotency-Key: its 503 is the answer
    assert seen == [f"GET {A}", f"GET {B}", f"POST {A}"]


async def test_the_async_client_moves_on_as_the_sync_one_does():
    seen: list[str] = []
    async with AsyncClient(f"{A},{B}", "t", transport=controllers(seen, {A})) as client:
        assert (await client.request("GET", PATH)).json() == {"id": 7}
    assert seen == [f"GET {A}", f"GET {B}"]


def test_the_event_stream_resumes_on_the_next_controller_after_the_last_id_seen():
    resumed_after: list[str | None] = []

    class Dropped(httpx.SyncByteStream):
        def __iter__(self):
            yield b'id: 5\ndata: {"n": 5}\n\n'
            raise httpx.ReadError("connection reset")

    def answer(request: httpx.Request, origin: str) -> httpx.Response:
        if origin == A:
            return httpx.Response(200, stream=Dropped(), headers={"Content-Type": "text/event-stream"})
        resumed_after.append(request.headers.get("Last-Event-ID"))
        return httpx.Response(200, content=b'id: 6\ndata: {"n": 6}\n\n', headers={"Content-Type": "text/event-stream"})

    client = Client(f"{A},{B}", "t", transport=controllers([], set(), answer))
    events = client.events(reconnects=1)
    assert [next(events).data, next(events).data] == [{"n": 5}, {"n": 6}]
    assert resumed_after == ["5"] and client.url == B


def test_a_function_result_is_put_to_the_next_controller_when_the_first_refuses_connections(monkeypatch):
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from corral import function
    from tests.e2e.cluster import free_port

    stored: list[tuple[str, bytes]] = []

    class Controller(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            stored.append((self.path, self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    monkeypatch.setattr(function.time, "sleep", lambda seconds: None)
    with ThreadingHTTPServer(("127.0.0.1", 0), Controller) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        env = {"CORRAL_URL": f"http://127.0.0.1:{free_port()},http://127.0.0.1:{server.server_port}",
               "CORRAL_JOB_ID": "3", "CORRAL_TASK_INDEX": "0", "CORRAL_ATTEMPT": "1", "CORRAL_TOKEN": "t"}
        assert function.upload(b"result", env) == 204
        server.shutdown()
    assert stored == [("/api/v1/jobs/3/tasks/0/result?attempt=1", b"result")]
