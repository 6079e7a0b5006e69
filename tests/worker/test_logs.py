"""The log shipper: appended bytes in order, at the right offsets, resumed after failures."""

from __future__ import annotations

import asyncio
import errno
import os

import pytest

from corral.worker import logs
from corral.worker.logs import LogShipper, capture


class Controller:
    """Receives log chunks; fails the sends it is told to fail."""

    def __init__(self) -> None:
        self.chunks: list[tuple[int, int, str, int, bytes]] = []
        self.failures = 0

    async def send(self, task_id: int, attempt: int, stream: str, offset: int, data: bytes) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("controller unreachable")
        self.chunks.append((task_id, attempt, stream, offset, data))

    def received(self, stream: str = "stdout") -> bytes:
        """The stream as the controller would assemble it, checking that every chunk lands at its end."""
        data = b""
        for *_, name, offset, chunk in self.chunks:
            if name == stream:
                assert offset == len(data), f"chunk at {offset} after {len(data)} bytes"
                data += chunk
        return data


@pytest.fixture
def controller():
    return Controller()


def append(path, data: bytes) -> None:
    with path.open("ab") as file:
        file.write(data)


async def test_appended_bytes_are_shipped_in_order_from_the_last_offset(tmp_path, controller):
    shipper = LogShipper(controller.send)
    shipper.watch(3, 1, tmp_path)
    append(tmp_path / "stdout", b"abc")
    await shipper.ship_once()
    append(tmp_path / "stdout", b"de")
    append(tmp_path / "stderr", b"oops")
    await shipper.ship_once()
    await shipper.ship_once()  # nothing new: nothing sent
    assert controller.chunks == [(3, 1, "stdout", 0, b"abc"), (3, 1, "stdout", 3, b"de"), (3, 1, "stderr", 0, b"oops")]


async def test_a_failed_send_is_retried_from_the_same_offset(tmp_path, controller):
    shipper = LogShipper(controller.send)
    shipper.watch(1, 0, tmp_path)
    append(tmp_path / "stdout", b"first ")
    await shipper.ship_once()
    append(tmp_path / "stdout", b"second")
    controller.failures = 1
    await shipper.ship_once()
    assert controller.received() == b"first "
    await shipper.ship_once()
    assert controller.received() == b"first second"
    assert [c[3] for c in controller.chunks] == [0, 6]


async def test_chunks_are_at_most_the_chunk_size(tmp_path, controller):
    shipper = LogShipper(controller.send, chunk=4)
    shipper.watch(1, 0, tmp_path)
    append(tmp_path / "stdout", b"0123456789")
    await shipper.ship_once()
    assert [(c[3], c[4]) for c in controller.chunks] == [(0, b"0123"), (4, b"4567"), (8, b"89")]


async def test_flush_retries_until_shipped_then_stops_tracking(tmp_path, controller):
    shipper = LogShipper(controller.send, flush_timeout=5)
    shipper.watch(1, 0, tmp_path)
    append(tmp_path / "stdout", b"last words")
    controller.failures = 2
    await shipper.flush(1, 0)
    assert controller.received() == b"last words"
    append(tmp_path / "stdout", b" after the end")
    await shipper.ship_once()
    assert controller.received() == b"last words"


async def test_a_flush_that_times_out_leaves_the_rest_to_the_rounds(tmp_path, controller):
    shipper = LogShipper(controller.send, flush_timeout=0)
    shipper.watch(1, 0, tmp_path)
    append(tmp_path / "stdout", b"late")
    controller.failures = 1
    await shipper.flush(1, 0)
    assert controller.received() == b""
    await shipper.ship_once()
    assert controller.received() == b"late"
    append(tmp_path / "stdout", b" more")
    await shipper.ship_once()  # shipped in full after its flush: no longer tracked
    assert controller.received() == b"late"


async def test_flush_of_an_attempt_with_no_files_returns_at_once(controller):
    shipper = LogShipper(controller.send)
    await shipper.flush(9, 9)
    assert controller.chunks == []


async def test_a_round_opens_only_the_streams_an_attempt_wrote(tmp_path, controller, monkeypatch):
    """Most tasks of an array print nothing: three opens that fail cost each round 44 us, one listing 5."""
    opened = []
    monkeypatch.setattr(logs, "no_follow", lambda path, flags: opened.append(path) or os.open(path, flags))
    shipper = LogShipper(controller.send)
    shipper.watch(3, 1, tmp_path)
    await shipper.ship_once()
    append(tmp_path / "stderr", b"oops")
    await shipper.flush(3, 1)
    assert opened == [str(tmp_path / "stderr")] and controller.received("stderr") == b"oops"


async def test_a_round_waiting_on_a_flush_that_ends_the_attempt_carries_on(tmp_path, controller):
    """The round waits for the flush's sends; the flush then forgets the attempt, which the round must survive."""
    arrived, release = asyncio.Event(), asyncio.Event()

    async def slow_send(*chunk):
        arrived.set()
        await release.wait()
        await controller.send(*chunk)

    shipper = LogShipper(slow_send)
    shipper.watch(1, 0, tmp_path)
    append(tmp_path / "stdout", b"last words")
    flushing = asyncio.create_task(shipper.flush(1, 0))
    await arrived.wait()  # the flush is sending, holding the attempt
    rounding = asyncio.create_task(shipper.ship_once())
    await asyncio.sleep(0)
    release.set()
    await asyncio.gather(flushing, rounding)
    assert controller.received() == b"last words"


async def captured(path, *chunks: bytes, limit: int = 1 << 20) -> None:
    """Run `capture` into `path` over a pipe the chunks are written to, then closed."""
    read, write = os.pipe()
    capturing = asyncio.create_task(capture(read, path, limit))
    for chunk in chunks:
        os.write(write, chunk)
    os.close(write)
    await asyncio.wait_for(capturing, 10)


async def test_a_silent_stream_creates_no_file_and_a_printing_one_gets_everything(tmp_path):
    await captured(tmp_path / "stdout")
    assert not (tmp_path / "stdout").exists()
    await captured(tmp_path / "stderr", b"first ", b"second")
    assert (tmp_path / "stderr").read_bytes() == b"first second"


async def test_a_stream_appends_to_what_an_earlier_capture_wrote(tmp_path):
    await captured(tmp_path / "stdout", b"task\n")
    await captured(tmp_path / "stdout", b"exec\n")
    assert (tmp_path / "stdout").read_bytes() == b"task\nexec\n"


async def test_a_link_or_a_fifo_put_where_a_stream_goes_is_refused_not_written_through(tmp_path):
    secret = tmp_path / "root-only"
    secret.write_bytes(b"secret")
    (tmp_path / "stdout").symlink_to(secret)
    with pytest.raises(OSError) as refused:
        await captured(tmp_path / "stdout", b"overwrite")
    assert refused.value.errno == errno.ELOOP and secret.read_bytes() == b"secret"
    os.mkfifo(tmp_path / "stderr")
    with pytest.raises(OSError):  # no reader: refused at once rather than blocking the open
        await captured(tmp_path / "stderr", b"out")


async def test_a_capture_reads_its_pipe_from_the_loop_s_selector_without_a_transport(tmp_path, monkeypatch):
    """Each task has two streams: a transport and a stream reader for each cost its start more than the reads."""
    loop = asyncio.get_running_loop()
    monkeypatch.setattr(loop, "connect_read_pipe", lambda *args: pytest.fail("made a transport"))
    await captured(tmp_path / "stdout", b"printed")
    assert (tmp_path / "stdout").read_bytes() == b"printed"
