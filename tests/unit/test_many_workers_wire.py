"""bench/many_workers.py's simulated workers on the wire: what the controller is sent, and the connection's ends."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path

import httptools
import pytest

from corral.core.protocol import API, HeartbeatRequest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "many_workers.py"
DEADLINE = 10.0  # seconds any one test may wait for the fake controller's side


def load():
    spec = importlib.util.spec_from_file_location("many_workers", BENCH)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


many_workers = load()


class FakeController(asyncio.Protocol):
    """Records each request as (connection, method, path, headers, body) and answers it by `answer`."""

    def __init__(self, seen: list, answer) -> None:
        self.seen, self.answer, self.parser = seen, answer, httptools.HttpRequestParser(self)
        self.headers: dict[bytes, bytes] = {}
        self.body = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_url(self, url: bytes) -> None:
        self.url, self.headers, self.body = url.decode(), {}, b""

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.lower()] = value

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.seen.append((id(self), self.parser.get_method(), self.url, self.headers, self.body))
        reply = self.answer(self.url, json.loads(self.body), len(self.seen))
        if reply is not None:
            document, close = reply
            body = json.dumps(document).encode()
            self.transport.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%b\r\n%b"
                                 % (len(body), b"connection: close\r\n" if close else b"", body))


async def serving(seen: list, answer) -> tuple[asyncio.Server, str]:
    server = await asyncio.get_running_loop().create_server(lambda: FakeController(seen, answer), "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def test_a_simulated_worker_registers_polls_and_reports_a_tasks_life_in_the_protocols_wire_format():
    seen: list = []
    reported = asyncio.Event()

    def answer(path: str, document: dict, count: int):
        if path == f"{API}/workers":
            return {"worker_id": "w-1", "heartbeat_interval": 0.5}, False
        if document["reports"]:
            reported.set()
        orders = [{"action": "build", "task_id": 7, "attempt": 1}] if document["wait"] and count == 2 else []
        return {"orders": orders, "heartbeat_interval": 0.5}, False

    server, url = await serving(seen, answer)
    timings = many_workers.Timings()
    worker = many_workers.SimulatedWorker(url, "join-token", "sim-0001", timings)
    serve = asyncio.create_task(worker.serve(asyncio.Semaphore(1)))
    try:
        async with asyncio.timeout(DEADLINE):
            await reported.wait()
    finally:
        serve.cancel()
        server.close()
    register, poll, *rest = seen
    assert register[1:3] == (b"POST", f"{API}/workers")
    assert json.loads(register[4])["name"] == "sim-0001"
    for _, method, path, headers, body in [poll, *rest]:
        assert (method, path) == (b"POST", f"{API}/workers/w-1/heartbeat")
        assert headers[b"authorization"] == b"Bearer join-token"
        assert headers[b"content-type"] == b"application/json"
        assert headers[b"host"] == url.removeprefix("http://").encode()
        assert body == json.dumps(json.loads(body), separators=(",", ":")).encode()  # as httpx writes JSON
        HeartbeatRequest.model_validate(json.loads(body))
    assert json.loads(poll[4]) == {"reports": [], "wait": 0.5}
    reports = next(json.loads(body)["reports"] for *_, body in rest if json.loads(body)["reports"])
    assert [report["state"] for report in reports] == ["BUILDING", "PREPARED", "RUNNING", "SUCCEEDED"]
    assert poll[0] not in {connection for connection, *_, body in rest if json.loads(body)["wait"] == 0}  # its own


async def test_a_connection_the_controller_closes_is_opened_again_for_the_next_request():
    seen: list = []
    server, url = await serving(seen, lambda path, document, count: ({"n": count}, count == 1))
    connection = many_workers.Connection("127.0.0.1", int(url.rsplit(":", 1)[1]), b"", many_workers.Timings())
    try:
        async with asyncio.timeout(DEADLINE):
            assert await connection.post("/a", {}, DEADLINE) == (200, b'{"n": 1}')
            assert await connection.post("/b", {}, DEADLINE) == (200, b'{"n": 2}')
    finally:
        connection.give_up("the test ends")
        server.close()
    assert seen[0][0] != seen[1][0]


async def test_a_request_unanswered_in_its_time_fails_and_the_next_goes_on_a_new_connection():
    seen: list = []
    server, url = await serving(seen, lambda path, document, count: None if count == 1 else ({"n": count}, False))
    connection = many_workers.Connection("127.0.0.1", int(url.rsplit(":", 1)[1]), b"", many_workers.Timings())
    try:
        async with asyncio.timeout(DEADLINE):
            with pytest.raises(many_workers.RequestFailed, match="no answer in 0.1 s"):
                await connection.post("/a", {}, 0.1)
            assert await connection.post("/b", {}, DEADLINE) == (200, b'{"n": 2}')
    finally:
        connection.give_up("the test ends")
        server.close()
    assert seen[0][0] != seen[1][0]
