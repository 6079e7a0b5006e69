"""An in-memory relay for the worker's channels: the runner dials it as it would the controller, and each test holds
the client's end of the WebSocket pair, which records what the worker sends."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from websockets import ConnectionClosed
from websockets.frames import Close

from corral.core.protocol import RelayOrder
from corral.core.relay import STDERR, STDOUT, Eof, Resize
from tests.waiting import wait_until

_sessions = itertools.count()


class _Closed:
    """What a closed socket's next recv finds."""


class FakeSocket:
    """One end of an in-memory WebSocket pair: frames are delivered in order; a close reaches both ends."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.peer: FakeSocket | None = None
        self.close_frame: tuple[int, str] | None = None  # (code, reason), once closed by either side

    async def send(self, message: bytes | str) -> None:
        if self.close_frame is not None:
            raise ConnectionClosed(Close(*self.close_frame), None)
        assert self.peer is not None
        self.peer.inbox.put_nowait(message)

    async def recv(self) -> bytes | str:
        item = await self.inbox.get()
        if isinstance(item, _Closed):
            self.inbox.put_nowait(item)
            assert self.close_frame is not None
            raise ConnectionClosed(Close(*self.close_frame), None)
        return item

    async def close(self, code: int = 1000, reason: str = "") -> None:
        assert self.peer is not None
        for end in (self, self.peer):
            if end.close_frame is None:
                end.close_frame = (code, reason)
                end.inbox.put_nowait(_Closed())


def socket_pair() -> tuple[FakeSocket, FakeSocket]:
    a, b = FakeSocket(), FakeSocket()
    a.peer, b.peer = b, a
    return a, b


class Client:
    """The client's end of one channel: collects output by stream and control messages as they come."""

    def __init__(self, ws: FakeSocket) -> None:
        self.ws = ws
        self.streams: dict[int, bytearray] = {STDOUT: bytearray(), STDERR: bytearray()}
        self.raw = bytearray()  # a port channel's bytes
        self.controls: list = []
        self.closed: tuple[int, str] | None = None
        self._reading = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            while True:
                frame = await self.ws.recv()
                if isinstance(frame, bytes):
                    self.raw += frame
                    if frame[:1] in (bytes([STDOUT]), bytes([STDERR])):
                        self.streams[frame[0]] += frame[1:]
                else:
                    self.controls.append(json.loads(frame))
        except ConnectionClosed:
            self.closed = self.ws.close_frame

    @property
    def out(self) -> bytes:
        return bytes(self.streams[STDOUT])

    async def type(self, data: bytes) -> None:
        await self.ws.send(data)

    async def resize(self, rows: int, cols: int) -> None:
        await self.ws.send(Resize(rows=rows, cols=cols).model_dump_json())

    async def eof(self) -> None:
        await self.ws.send(Eof().model_dump_json())

    async def leave(self) -> None:
        await self.ws.close()

    async def output(self, text: bytes, timeout: float = 5.0, stream: int = STDOUT) -> None:
        await wait_until(lambda: text in self.streams[stream], timeout, f"{text!r} on stream {stream}, "
                                                                        f"having {bytes(self.streams[stream])!r}")

    async def control(self, kind: str, timeout: float = 5.0) -> dict:
        found = await wait_until(lambda: [c for c in self.controls if c["type"] == kind], timeout, f"a {kind}")
        return found[-1]

    async def end(self, timeout: float = 5.0) -> tuple[int, str]:
        await wait_until(lambda: self.closed, timeout, "the channel to close")
        assert self.closed is not None
        return self.closed


class FakeRelay:
    """Dialed by the runner for each RelayOrder (the `dial` of Runner); hands the client's end to the test."""

    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Future[FakeSocket]] = {}

    @asynccontextmanager
    async def dial(self, order: RelayOrder) -> AsyncIterator[FakeSocket]:
        client, worker = socket_pair()
        self._waiting[order.session].set_result(client)
        try:
            yield worker
        finally:
            await worker.close()  # as websockets' own context manager does

    async def open(self, runner, kind: str, task_id: int = 1, attempt: int = 0, timeout: float = 5.0,
                   **fields) -> Client:
        """Hand the runner a relay order, as a heartbeat reply would, and return the client's end once dialed."""
        session = f"session-{next(_sessions):08d}-test"
        self.expect(session)
        order = RelayOrder(session=session, task_id=task_id, attempt=attempt, kind=kind, **fields)
        assert runner.submit(order) is not None
        return await self.client(session, timeout)

    def expect(self, session: str) -> None:
        """Be ready for the runner to dial `session`."""
        self._waiting[session] = asyncio.get_running_loop().create_future()

    async def client(self, session: str, timeout: float = 5.0) -> Client:
        """The client's end of `session`, once the runner has dialed it."""
        async with asyncio.timeout(timeout):
            return Client(await self._waiting[session])
