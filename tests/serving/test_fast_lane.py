"""The router's fast lane on loopback: a real uvicorn server speaking through it, a real router, a tiny replica."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import socket
import struct
import termios
from types import SimpleNamespace

import uvicorn

from corral.core.config import RouterConfig
from corral.core.deployment_spec import DeploymentSpec
from corral.core.serving import Catalog, DeploymentFacts, DeploymentState, Endpoint
from corral.metrics import REGISTRY
from corral.serving import proxy
from corral.serving.fast_lane import FastLane, protocol_for
from corral.serving.host import RouterServices, StandaloneTokens
from corral.serving.pool import Pool
from corral.serving.standalone import RouterApp
from corral.serving.upstream import Connection
from corral.serving.wiring import router_from_config
from tests.serving.loopback import Replica, ok
from tests.waiting import wait_until

ADMIN = "admin-token"
AUTH = b"authorization: Bearer admin-token\r\n"


class Backend:
    """The router's way to the controller, recorded: a scale-up is what a cold start asks for."""

    def __init__(self) -> None:
        self.scaled: list[tuple[str, int]] = []

    async def scale(self, name: str, replicas: int, reason: str) -> None:
        self.scaled.append((name, replicas))

    async def pool(self) -> Pool:
        return Pool()

    async def report_load(self, loads: dict[str, int]) -> None:
        pass


def catalog(address: str | None, **spec) -> Catalog:
    facts = DeploymentFacts(1, "svc", DeploymentSpec(name="svc", command=["x"], model_names=["m"], **spec),
                            DeploymentState.READY, 0.0, 1 if address else 0)
    return Catalog({"svc": facts}, {"svc": (Endpoint(7, address),)} if address else {})


class Lane:
    """A router server on a free port whose HTTP protocol is the fast lane."""

    def __init__(self, address: str | None, keep_alive: float = 5.0, **spec) -> None:
        self.backend = Backend()
        self.router = router_from_config(self.backend, RouterConfig())
        self.router.publish(catalog(address, **spec))
        self.app = RouterApp(routes=proxy.routes())
        self.app.state.services = RouterServices(self.router, StandaloneTokens(admin=ADMIN))
        self.keep_alive = keep_alive

    async def __aenter__(self) -> Lane:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, lifespan="off", log_level="warning", http=protocol_for(self.app),
                                timeout_keep_alive=self.keep_alive)
        self.server = uvicorn.Server(config)
        self.task = asyncio.create_task(self.server.serve(sockets=[sock]))
        await wait_until(lambda: self.server.started, what="the router to listen")
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.should_exit = True
        try:  # a graceful stop waits for requests in hand; a test that failed may have left one that never ends
            await asyncio.wait_for(asyncio.shield(self.task), 10)
        except TimeoutError:
            self.server.force_exit = True
            await self.task
        await self.router.upstream.close()

    async def connect(self) -> Client:
        return Client(*await asyncio.open_connection("127.0.0.1", self.port))

    def fast_lane(self) -> FastLane:
        """The one connection the fast lane serves."""
        (protocol,) = (c for c in self.server.server_state.connections if isinstance(c, FastLane))
        return protocol

    def lanes(self) -> int:
        """Connections the fast lane serves (a connection handed to uvicorn leaves this count)."""
        return sum(isinstance(c, FastLane) for c in self.server.server_state.connections)


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def ask(self, request: bytes) -> tuple[int, dict[bytes, bytes], bytes]:
        self.writer.write(request)
        return await self.answer()

    async def answer(self) -> tuple[int, dict[bytes, bytes], bytes]:
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in
                   (line.partition(b":") for line in head.split(b"\r\n")[1:] if line)}
        if b"content-length" in headers:
            return status, headers, await self.reader.readexactly(int(headers[b"content-length"]))
        body = b""
        while size := int((await self.reader.readuntil(b"\r\n")).strip(), 16):
            body += (await self.reader.readexactly(size + 2))[:-2]
        await self.reader.readuntil(b"\r\n")
        return status, headers, body

    def close(self) -> None:
        self.writer.close()


def get(path: str, extra: bytes = AUTH) -> bytes:
    return b"GET %s HTTP/1.1\r\nhost: router\r\n%b\r\n" % (path.encode(), extra)


def post(path: str, body: bytes, extra: bytes = AUTH) -> bytes:
    return b"POST %s HTTP/1.1\r\nhost: router\r\ncontent-length: %d\r\n%b\r\n%b" % (path.encode(), len(body), extra,
                                                                                   body)


def unread(transport: asyncio.Transport) -> int:
    """Bytes that arrived on the transport's socket and that nobody has read yet."""
    pending = fcntl.ioctl(transport.get_extra_info("socket").fileno(), termios.FIONREAD, b"\0" * 4)
    return struct.unpack("i", pending)[0]


def counted(metric: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(metric, {"deployment": "svc", **labels}) or 0.0


async def test_a_proxied_request_is_relayed_in_the_fast_lane_on_a_kept_alive_connection():
    async with Replica(ok) as replica, Lane(replica.address) as lane:
        ok_before = counted("corral_router_requests_total", status="200")
        timed_before = counted("corral_router_request_seconds_count")
        client = await lane.connect()
        status, headers, body = await client.ask(get("/serve/svc/x?y=1", AUTH + b"connection: keep-alive\r\n"))
        assert (status, body, headers[b"x-echo"]) == (200, b"hi", b"yes")
        status, _, body = await client.ask(post("/serve/svc/echo", b"payload"))
        assert (status, body) == (200, b"payload")
        assert lane.lanes() == 1 and replica.connections == 1  # one client, one replica connection, both kept
        first, second = replica.received
        assert first.startswith(b"GET /x?y=1 HTTP/1.1\r\n")
        assert b"authorization" not in first.lower() and b"keep-alive" not in first.lower()
        assert b"x-forwarded-for: 127.0.0.1" in first
        assert second.startswith(b"POST /echo HTTP/1.1") and second.endswith(b"\r\n\r\npayload")
        assert lane.router.endpoint_load == {} and lane.router.scheduler.in_flight.get("svc", 0) == 0
        assert counted("corral_router_requests_total", status="200") == ok_before + 2
        assert counted("corral_router_request_seconds_count") == timed_before + 2
        client.close()


async def test_an_openai_request_is_routed_by_its_model():
    async with Replica(ok) as replica, Lane(replica.address) as lane:
        client = await lane.connect()
        status, _, body = await client.ask(post("/v1/embeddings", b'{"model": "m", "input": "a"}'))
        assert (status, body) == (200, b'{"model": "m", "input": "a"}')
        assert replica.received[0].startswith(b"POST /v1/embeddings HTTP/1.1")
        assert lane.lanes() == 1


async def test_refusals_are_answered_before_any_replica_hears_of_the_request():
    async with Replica(ok) as replica, Lane(replica.address) as lane:
        client = await lane.connect()
        refused = [(get("/serve/svc/x", b""), 401), (get("/serve/svc/x", b"authorization: Bearer no\r\n"), 401),
                   (get("/serve/other/x"), 404), (post("/v1/embeddings", b"not json"), 400),
                   (post("/v1/embeddings", b'{"model": 3}'), 400), (post("/v1/completions", b'{"model": "z"}'), 404)]
        for request, status in refused:
            answered, headers, body = await client.ask(request)
            assert answered == status and b'"error"' in body and headers[b"content-type"] == b"application/json"
        assert replica.received == [] and lane.lanes() == 1


async def test_a_chunked_response_is_passed_on_piece_by_piece():
    second_piece = asyncio.Event()

    async def streams(reader, writer, body):
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: text/event-stream\r\n\r\n"
                     b"7\r\ndata: 1\r\n")
        await second_piece.wait()
        writer.write(b"7\r\ndata: 2\r\n0\r\n\r\n")

    async with Replica(streams) as replica, Lane(replica.address) as lane:
        client = await lane.connect()
        client.writer.write(get("/serve/svc/stream"))
        head = await client.reader.readuntil(b"\r\n\r\n")
        assert b"transfer-encoding: chunked" in head.lower() and b"text/event-stream" in head
        assert await client.reader.readuntil(b"data: 1\r\n") == b"7\r\ndata: 1\r\n"  # before the replica wrote more
        second_piece.set()
        assert await client.reader.readuntil(b"0\r\n\r\n") == b"7\r\ndata: 2\r\n0\r\n\r\n"


async def test_pipelined_requests_are_answered_in_order():
    async with Replica(ok) as replica, Lane(replica.address) as lane:
        client = await lane.connect()
        client.writer.write(post("/serve/svc/a", b"one") + post("/serve/svc/b", b"two") + get("/serve/svc/c"))
        assert [(await client.answer())[2] for _ in range(3)] == [b"one", b"two", b"hi"]


async def test_a_repeated_head_is_served_from_its_last_parse_and_the_parser_keeps_pace():
    async with Replica(ok) as replica, Lane(replica.address) as lane:
        client = await lane.connect()
        for body in (b"first", b"other", b"third"):  # one head, three bodies of its length
            assert (await client.ask(post("/serve/svc/echo", body)))[2] == body
        assert (await client.ask(get("/serve/svc/x")))[2] == b"hi" and lane.lanes() == 1  # parsed from a message start
        assert (await client.ask(post("/serve/svc/echo", b"again")))[2] == b"again"
        client.writer.write(b"POST /serve/svc/echo HTTP/1.1\r\nhost: r\r\ntransfer-encoding: chunked\r\n" + AUTH
                            + b"\r\n5\r\nhello\r\n0\r\n\r\n")  # and one the parser must judge hands over
        assert (await client.answer())[2] == b"hello" and lane.lanes() == 0
        assert [r.rpartition(b"\r\n\r\n")[2] for r in replica.received] == [
            b"first", b"other", b"third", b"", b"again", b"hello"]
        assert replica.received[0].partition(b"\r\n\r\n")[0] == replica.received[1].partition(b"\r\n\r\n")[0]


async def test_a_repeated_request_is_judged_again_once_the_catalog_changes():
    async with Replica(ok) as replica, Lane(replica.address, public=True) as lane:
        client = await lane.connect()
        assert (await client.ask(get("/serve/svc/x", b"")))[0] == 200
        lane.router.publish(catalog(replica.address))  # no longer public
        assert (await client.ask(get("/serve/svc/x", b"")))[0] == 401
        assert (await client.ask(get("/serve/svc/x")))[0] == 200


async def test_a_replica_head_sent_again_is_relayed_as_the_first_and_a_new_one_as_itself():
    sized = b"HTTP/1.1 200 OK\r\nx-a: 1\r\ncontent-length: 2\r\n\r\nhi"
    chunked = b"HTTP/1.1 200 OK\r\nx-a: 1\r\nconnection: keep-alive\r\ntransfer-encoding: chunked\r\n\r\n"
    answers = [sized, sized, chunked + b"2\r\nhi\r\n0\r\n\r\n", chunked + b"1\r\nh\r\n1\r\ni\r\n0\r\n\r\n", sized]

    async def answer(reader, writer, body):
        writer.write(answers[len(replica.received) - 1])

    async with Replica(answer) as replica, Lane(replica.address) as lane:
        client = await lane.connect()
        relayed = [await client.ask(get("/serve/svc/x")) for _ in answers]
        assert [body for _, _, body in relayed] == [b"hi"] * 5
        assert [b"transfer-encoding" in headers for _, headers, _ in relayed] == [False, False, True, True, False]
        assert all(b"connection" not in headers and headers[b"x-a"] == b"1" for _, headers, _ in relayed)


async def test_other_requests_hand_the_connection_to_uvicorn_which_answers_through_the_app():
    async with Replica(ok) as replica, Lane(replica.address) as lane:
        client = await lane.connect()
        assert (await client.ask(get("/serve/svc/x")))[0] == 200 and lane.lanes() == 1
        status, _, body = await client.ask(get("/v1/models"))
        assert status == 200 and b'"id":"m"' in body and lane.lanes() == 0
        status, _, body = await client.ask(post("/serve/svc/echo", b"still served"))  # now by proxy.dispatch
        assert (status, body) == (200, b"still served")
        upgrade = await lane.connect()
        upgrade.writer.write(b"GET /serve/svc/x HTTP/1.1\r\nhost: r\r\nconnection: upgrade\r\nupgrade: h2c\r\n"
                             + AUTH + b"\r\n")
        assert (await asyncio.wait_for(upgrade.answer(), 5))[0] == 200 and lane.lanes() == 0  # served as plain HTTP
        for request in (b"HEAD /serve/svc/x HTTP/1.1\r\nhost: r\r\n" + AUTH + b"\r\n",
                        b"GET /serve/svc/x HTTP/1.0\r\nhost: r\r\n" + AUTH + b"\r\n",
                        b"GET /serve/svc/x HTTP/1.1\r\nhost: r\r\nconnection: close\r\n" + AUTH + b"\r\n",
                        b"POST /serve/svc/echo HTTP/1.1\r\nhost: r\r\ntransfer-encoding: chunked\r\n" + AUTH
                        + b"\r\n5\r\nhello\r\n0\r\n\r\n"):
            other = await lane.connect()
            other.writer.write(request)
            head = await other.reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200")
            assert lane.lanes() == 0
            other.close()
        assert replica.received[-1].endswith(b"hello")


async def test_a_body_that_does_not_come_whole_with_its_head_is_streamed_by_the_general_path():
    async with Replica(ok) as replica, Lane(replica.address) as lane:
        client = await lane.connect()
        client.writer.write(b"POST /serve/svc/echo HTTP/1.1\r\nhost: r\r\ncontent-length: 10\r\n" + AUTH + b"\r\nhello")
        await wait_until(lambda: lane.lanes() == 0, what="the lane to hand the half-sent request to uvicorn")
        client.writer.write(b"world")
        status, _, body = await client.answer()
        assert (status, body) == (200, b"helloworld")


async def test_a_request_waits_for_a_cold_start_and_is_then_relayed():
    async with Replica(ok) as replica, Lane(None) as lane:
        client = await lane.connect()
        client.writer.write(get("/serve/svc/x"))
        await wait_until(lambda: lane.backend.scaled, what="the cold start's scale-up")
        assert lane.backend.scaled == [("svc", 1)]
        assert REGISTRY.get_sample_value("corral_router_queue_depth") == 1  # waiting on the start
        lane.router.publish(catalog(replica.address))
        status, _, body = await client.answer()
        assert (status, body) == (200, b"hi")
        assert lane.lanes() == 1 and REGISTRY.get_sample_value("corral_router_queue_depth") == 0


async def test_a_client_that_leaves_while_queued_leaves_the_queue():
    async with Lane(None) as lane:
        client = await lane.connect()
        client.writer.write(get("/serve/svc/x"))
        await wait_until(lambda: lane.router.queue_view(), what="the request to queue")
        client.close()
        await wait_until(lambda: not lane.router.queue_view(), what="the queue to empty once the client left")
        assert lane.router.waiters == {}


async def test_a_client_that_leaves_mid_response_cuts_the_replica_off():
    started = asyncio.Event()

    async def never_ends(reader, writer, body):
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        started.set()
        await reader.read()  # until the router closes the connection
        return False

    async with Replica(never_ends) as replica, Lane(replica.address) as lane:
        client = await lane.connect()
        client.writer.write(get("/serve/svc/x"))
        await client.reader.readuntil(b"first\r\n")
        client.close()
        await asyncio.wait_for(replica.closed.wait(), 5)
        await wait_until(lambda: not lane.router.endpoint_load, what="the replica's load to be released")
        assert lane.router.scheduler.in_flight.get("svc", 0) == 0


async def test_a_kept_alive_connection_the_replica_closed_is_replaced_and_the_request_sent_again():
    async def once(reader, writer, body):
        await ok(reader, writer, body)
        await writer.drain()
        return False  # then close, as a replica's keep-alive timeout does

    async with Replica(once) as replica, Lane(replica.address) as lane:
        client = await lane.connect()
        assert (await client.ask(post("/serve/svc/a", b"one")))[2] == b"one"
        await asyncio.wait_for(replica.closed.wait(), 5)
        assert (await client.ask(post("/serve/svc/b", b"two")))[2] == b"two"
        assert replica.connections == 2


async def test_a_replica_that_cannot_be_reached_is_a_502():
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{unused.getsockname()[1]}"
    async with Lane(address) as lane:
        client = await lane.connect()
        status, _, body = await client.ask(get("/serve/svc/x"))
        assert status == 502 and b"replica 7 of svc failed" in body
        assert lane.router.endpoint_load == {}


async def test_past_its_concurrency_limit_a_deployment_answers_429():
    release = asyncio.Event()

    async def held(reader, writer, body):
        await release.wait()
        await ok(reader, writer, body)

    async with Replica(held) as replica, Lane(replica.address, concurrency=1) as lane:
        first, second = await lane.connect(), await lane.connect()
        first.writer.write(get("/serve/svc/x"))
        await wait_until(lambda: lane.router.endpoint_load, what="the first request to reach the replica")
        assert REGISTRY.get_sample_value("corral_router_in_flight", {"deployment": "svc"}) == 1
        refused_before = counted("corral_router_requests_total", status="429")
        status, _, body = await second.ask(get("/serve/svc/x"))
        assert status == 429 and counted("corral_router_requests_total", status="429") == refused_before + 1
        release.set()
        assert (await first.answer())[0] == 200
        assert REGISTRY.get_sample_value("corral_router_in_flight", {"deployment": "svc"}) == 0


async def test_an_idle_connection_is_closed_after_the_keep_alive_timeout():
    async with Replica(ok) as replica, Lane(replica.address, keep_alive=0.1) as lane:
        client = await lane.connect()
        assert (await client.ask(get("/serve/svc/x")))[0] == 200
        assert await asyncio.wait_for(client.reader.read(), 5) == b""  # closed by the router


async def test_shutdown_lets_the_request_in_hand_finish():
    release = asyncio.Event()

    async def held(reader, writer, body):
        await release.wait()
        await ok(reader, writer, body)

    async with Replica(held) as replica:
        lane = Lane(replica.address)
        await lane.__aenter__()
        client = await lane.connect()
        client.writer.write(get("/serve/svc/x"))
        await wait_until(lambda: lane.router.endpoint_load, what="the request to reach the replica")
        protocol = lane.fast_lane()
        stopping = asyncio.create_task(lane.__aexit__(None, None, None))
        await wait_until(lambda: protocol.closing, what="the router to begin its shutdown with the request in hand")
        release.set()
        assert (await client.answer())[0] == 200
        await asyncio.wait_for(stopping, 10)
        with contextlib.suppress(ConnectionError):
            assert await client.reader.read() == b""


async def test_a_streaming_request_stays_in_the_fast_lane_unless_it_must_wait_and_show_its_position():
    stream = b'{"model": "m", "stream": true}'
    async with Replica(ok) as replica, Lane(replica.address) as lane:
        client = await lane.connect()
        assert (await client.ask(post("/v1/chat/completions", stream)))[2] == stream and lane.lanes() == 1
    async with Replica(ok) as replica, Lane(None) as lane:
        client = await lane.connect()
        client.writer.write(post("/v1/chat/completions", stream))
        head = await client.reader.readuntil(b"\r\n\r\n")
        assert b"x-corral-queue-position" in head.lower() and lane.lanes() == 0  # the general path answers it
        lane.router.publish(catalog(replica.address))
        assert stream in await client.reader.readuntil(stream)


async def test_a_replica_that_hangs_up_without_answering_is_a_502_and_its_connection_is_dropped():
    async def hangs_up(reader, writer, body):
        return False

    async with Replica(hangs_up) as replica, Lane(replica.address) as lane:
        client = await lane.connect()
        status, _, body = await client.ask(get("/serve/svc/x"))
        assert status == 502 and b"closed the connection" in body
        assert (await client.ask(get("/serve/svc/x")))[0] == 502 and replica.connections == 2  # never reused
        assert lane.router.endpoint_load == {} and lane.lanes() == 1


async def test_a_slow_client_holds_the_replica_back_and_a_connection_left_held_reads_again_when_reused():
    release = asyncio.Event()

    async def held(reader, writer, body):
        await release.wait()
        await ok(reader, writer, body)

    async with Replica(held) as replica, Lane(replica.address) as lane:
        client = await lane.connect()
        client.writer.write(get("/serve/svc/x"))
        protocol = lane.fast_lane()
        await wait_until(lambda: protocol.exchange is not None and protocol.exchange.upstream is not None,
                         what="the request to be sent to the replica")
        upstream = protocol.exchange.upstream
        protocol.pause_writing()  # as the transport does when the client's buffer passes its high-water mark
        assert not upstream.transport.is_reading()
        protocol.resume_writing()
        assert upstream.transport.is_reading()
        protocol.pause_writing()
        release.set()
        await wait_until(lambda: unread(upstream.transport), what="the replica's answer to reach the router")
        assert not protocol.exchange.answering and not upstream.transport.is_reading()  # held: it waits in the socket
        protocol.resume_writing()
        assert (await client.answer())[0] == 200
        upstream.hold()  # as if the client's last write had paused it just before the exchange ended
        assert (await asyncio.wait_for(client.ask(get("/serve/svc/x")), 5))[0] == 200
        assert replica.connections == 1 and upstream.transport.is_reading()


async def test_pipelined_requests_that_turn_to_the_general_path_half_way_are_all_answered_in_order():
    async with Replica(ok) as replica, Lane(replica.address) as lane:
        client = await lane.connect()
        client.writer.write(post("/serve/svc/a", b"one") + get("/serve/svc/b") + get("/v1/models")
                            + post("/serve/svc/c", b"four") + b"HEAD /serve/svc/d HTTP/1.1\r\nhost: r\r\n" + AUTH
                            + b"\r\n" + post("/serve/svc/e", b"six"))
        answers = [await client.answer() for _ in range(4)]
        assert [body for _, _, body in answers[:2]] == [b"one", b"hi"]
        assert b'"id":"m"' in answers[2][2] and answers[3][2] == b"four"
        head = await client.reader.readuntil(b"\r\n\r\n")  # the HEAD answer: a head alone
        assert head.startswith(b"HTTP/1.1 200") and b"content-length: 2" in head.lower()
        assert (await client.answer())[2] == b"six" and lane.lanes() == 0


class FakeTransport:
    """Keeps what is written, so that a test can drive the protocols' callbacks by hand within one loop turn."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def get_extra_info(self, name: str):
        return ("127.0.0.1", 5555)

    def is_closing(self) -> bool:
        return self.closing

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.closing = True


async def test_a_request_arriving_while_a_pipelined_one_waits_its_turn_does_not_jump_ahead():
    lane = Lane("127.0.0.1:9")
    protocol = FastLane(lane.app, config=SimpleNamespace(timeout_keep_alive=5),
                        server_state=SimpleNamespace(connections=set()), app_state={})
    client, replica = FakeTransport(), FakeTransport()
    protocol.connection_made(client)
    upstream = Connection(lane.router.upstream, "127.0.0.1:9")
    upstream.connection_made(replica)
    lane.router.upstream.put_back(upstream)
    protocol.data_received(get("/serve/svc/1") + get("/serve/svc/2"))
    upstream.data_received(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n1")  # /2 is served on the next turn
    protocol.data_received(get("/serve/svc/3"))  # ...but more arrives first, in this same turn
    await asyncio.sleep(0)
    assert [request.split(b" ", 2)[1] for request in replica.written] == [b"/1", b"/2"]  # /3 waits for /2
    upstream.data_received(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n2")
    await asyncio.sleep(0)
    assert [request.split(b" ", 2)[1] for request in replica.written] == [b"/1", b"/2", b"/3"]
    upstream.data_received(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n3")
    assert b"".join(client.written).count(b"HTTP/1.1 200 OK") == 3 and protocol.exchange is None


async def test_a_head_still_unfinished_past_the_limit_is_left_to_uvicorn():
    async with Replica(ok) as replica, Lane(replica.address) as lane:
        client = await lane.connect()
        head = get("/serve/svc/x", AUTH + b"x-long: " + b"a" * (70 * 2**10) + b"\r\n")
        client.writer.write(head[:-2])  # no end of head yet: the lane stops holding it
        await wait_until(lambda: lane.lanes() == 0, what="the lane to hand the long head to uvicorn")
        status, _, body = await asyncio.wait_for(client.ask(head[-2:]), 5)
        assert (status, body) == (200, b"hi") and b"a" * 1000 in replica.received[0]  # relayed by the general path


async def test_pipelined_requests_past_the_bound_pause_reading_until_their_turn_comes():
    release = asyncio.Event()

    async def first_held(reader, writer, body):
        if not body:
            await release.wait()
        await ok(reader, writer, body)

    async with Replica(first_held) as replica, Lane(replica.address) as lane:
        client = await lane.connect()
        bodies = [bytes([65 + i]) * (60 * 2**10) for i in range(20)]  # 1.2 MB queued behind a held request
        client.writer.write(get("/serve/svc/held") + b"".join(post("/serve/svc/echo", body) for body in bodies))
        protocol = lane.fast_lane()
        await wait_until(lambda: protocol.paused, what="the lane to pause reading")
        assert len(protocol.buffer) <= 2 * 2**20  # held there, the rest waits in the socket
        release.set()
        assert (await client.answer())[2] == b"hi"
        assert [(await asyncio.wait_for(client.answer(), 5))[2] for _ in bodies] == bodies
        assert lane.lanes() == 1
