"""The client's plain session (http://, no proxy: http.client alone) against a real HTTP server on a thread."""

import socket
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from corral.client.errors import CorralError, Unanswered
from corral.client.http import Client
from corral.client.plain import Headers, PlainResponse, PlainSession, query_text
from tests.cli.conftest import job_view
from tests.cli.test_client import sse_event, waiting_controller


@contextmanager
def serving(handler, keep_alive: bool = True):
    """A server on 127.0.0.1 answering each request with `handler(httpx.Request) -> httpx.Response` (an event
    stream chunked, as the controller sends it); yields its URL and the connections it accepted. Without
    `keep_alive` it closes each connection after one reply, without saying so."""
    connections = []

    class Bridge(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self):
            super().setup()
            connections.append(self.client_address)

        def answer(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            request = httpx.Request(self.command, f"http://127.0.0.1{self.path}", headers=self.headers.items(),
                                    content=body)
            response = handler(request)
            content, chunked = response.read(), response.headers.get("content-type") == "text/event-stream"
            self.send_response(response.status_code)
            for name, value in response.headers.items():
                if name not in ("content-length", "transfer-encoding"):
                    self.send_header(name, value)
            self.send_header(*(("Transfer-Encoding", "chunked") if chunked else ("Content-Length", len(content))))
            self.end_headers()
            if chunked:
                for line in content.splitlines(keepends=True):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.write(b"0\r\n\r\n")
            else:
                self.wfile.write(content)
            self.close_connection = not keep_alive

        do_GET = do_POST = do_PUT = do_HEAD = answer

        def log_message(self, *args):
            pass

    with ThreadingHTTPServer(("127.0.0.1", 0), Bridge) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{server.server_port}", connections
        finally:
            server.shutdown()


def jobs_controller(request):
    if request.method == "POST":
        assert request.headers["idempotency-key"] == "K" and b'"command":["true"]' in request.content
        return httpx.Response(201, json=job_view(5).model_dump(mode="json"))
    if request.url.path == "/api/v1/jobs":
        return httpx.Response(200, json={"items": [job_view(i).model_dump(mode="json") for i in (3, 2)],
                                         "next_cursor": None})
    return httpx.Response(404, json={"detail": f"no job {request.url.path.rsplit('/', 1)[1]}"})


def test_a_plain_http_controller_is_reached_through_the_stdlib_over_one_connection():
    with serving(jobs_controller) as (url, connections), Client(url, "tok") as api:
        assert isinstance(api._http, PlainSession)
        assert [job["id"] for job in api.list_rows()] == [3, 2]
        assert api.submit({"command": ["true"]}, idempotency_key="K").id == 5
        with pytest.raises(CorralError, match="^no job 9$") as raised:
            api.get(9)
        assert raised.value.status == 404
        assert len(connections) == 1


def test_wait_reads_the_chunked_event_stream_while_it_reads_the_job():
    stream = sse_event(1, 3, "RUNNING") + sse_event(2, 3, "SUCCEEDED")
    handler, asked = waiting_controller(["RUNNING", "SUCCEEDED"], [stream])
    with serving(handler) as (url, connections), Client(url, "tok") as api:
        assert api.wait(3).state == "SUCCEEDED"
    assert [r.url.path for r in asked] == ["/api/v1/events", "/api/v1/jobs/3", "/api/v1/jobs/3"]
    assert len(connections) == 2  # the stream holds one while the job is read on another


def test_a_connection_the_controller_closed_while_idle_is_not_used_again():
    with serving(jobs_controller, keep_alive=False) as (url, connections), Client(url, "tok") as api:
        for _ in range(3):
            assert len(list(api.list_rows())) == 2
            time.sleep(0.05)  # the server's close has arrived
        assert len(connections) == 3


def test_a_refused_controller_is_named_and_the_next_one_answers():
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{unused.getsockname()[1]}"  # bound, not listening: refused
        with serving(jobs_controller) as (url, _):
            with pytest.raises(CorralError, match=f"cannot reach the controller at {dead}: .*refused"):
                Client(dead, "tok").get(1)
            assert len(list(Client(f"{dead},{url}", "tok").list_rows())) == 2


def test_a_reply_slower_than_the_timeout_is_a_clear_error():
    def slow(request):
        time.sleep(0.5)
        return httpx.Response(200, json=[])

    with serving(slow) as (url, _), pytest.raises(CorralError, match="cannot reach the controller at .*timed out"):
        Client(url, "tok", timeout=0.1).workers()


@pytest.mark.parametrize("url, variable", [("https://ctl:1", None), ("http://ctl:1", "HTTP_PROXY"),
                                           ("http://ctl:1", "no_proxy")])
def test_https_or_a_proxy_variable_goes_through_httpx(url, variable, monkeypatch):
    if variable:
        monkeypatch.setenv(variable, "http://proxy:3128")
    assert not isinstance(Client(url, "tok")._http, PlainSession)


class Chunks:
    """A reply whose body arrives in the given chunks."""

    def __init__(self, *chunks: bytes) -> None:
        self._chunks = list(chunks)

    def read1(self, size: int) -> bytes:
        return self._chunks.pop(0) if self._chunks else b""


def test_lines_split_at_crlf_lf_or_cr_even_across_chunks_and_a_last_line_without_an_end_counts():
    def lines(*chunks: bytes) -> list[str]:
        response = PlainResponse.__new__(PlainResponse)
        response._reply, response._release = Chunks(*chunks), lambda finished: None
        return list(response.iter_lines())

    assert lines(b"a\r\nb\nc\rd") == ["a", "b", "c", "d"]
    assert lines(b"a\r", b"\nb\r", b"c\r", b"") == ["a", "b", "c"]  # a CRLF cut in two is one end
    assert lines(b"\xc3", b"\xa9t\xc3\xa9\n\n") == ["\u00e9t\u00e9", ""]  # a character cut in two is one character


def test_a_query_is_written_as_httpx_writes_it():
    assert query_text({"state": ["PENDING", "RUNNING"], "follow": True, "all": False, "limit": 5, "wait": 1.5}) == \
        "state=PENDING&state=RUNNING&follow=true&all=false&limit=5&wait=1.5"
    assert query_text({"path": "/home/a b/ü"}) == "path=%2Fhome%2Fa+b%2F%C3%BC"


def test_a_path_beyond_ascii_is_quoted_and_a_stream_let_go_mid_way_leaves_no_bytes_behind():
    seen = []

    def controller(request):
        seen.append(request.url.raw_path)
        if request.url.path == "/api/v1/events":
            return httpx.Response(200, text="".join(sse_event(i, 3, "RUNNING") for i in range(1, 50)),
                                  headers={"Content-Type": "text/event-stream"})
        return jobs_controller(request)

    with serving(controller) as (url, connections):
        session = PlainSession({}, 5.0)
        assert session.request("GET", url + "/api/v1/deployments/é").status_code == 404
        assert seen[-1] == b"/api/v1/deployments/%C3%A9"
        session.request("GET", url + "/api/v1/deployments/d?all=true", params={"limit": 2})
        assert seen[-1] == b"/api/v1/deployments/d?all=true&limit=2"
        with session.stream("GET", url + "/api/v1/events", None) as response:
            assert next(response.iter_lines()).startswith("id: 1")
        assert [job["id"] for job in session.request("GET", url + "/api/v1/jobs").json()["items"]] == [3, 2]
        session.close()
    assert len(connections) == 2  # the stream's connection was closed, not used again


def test_a_refused_connection_is_unanswered_and_never_sent():
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        with pytest.raises(Unanswered) as raised:
            PlainSession({}, 5.0).request("POST", f"http://127.0.0.1:{unused.getsockname()[1]}/api/v1/jobs", json={})
    assert raised.value.sent is False


def test_headers_are_found_whatever_the_case_and_a_missing_one_is_a_key_error():
    headers = Headers([("X-Corral-Attempt", "2"), ("Vary", "a"), ("vary", "b")])
    assert headers["x-corral-attempt"] == headers.get("X-CORRAL-ATTEMPT") == "2" and "x-corral-attempt" in headers
    assert headers["Vary"] == "a, b"
    with pytest.raises(KeyError):
        headers["X-Corral-Log-Size"]
