"""A serving task gets a free port as $PORT, and its RUNNING report carries it."""

from __future__ import annotations

from corral.core.protocol import StartOrder
from tests.worker.support import Harness, build_order


async def test_allocate_port_gives_the_process_its_port_and_reports_it(tmp_path):
    harness = Harness(tmp_path)
    await harness.act(build_order(["sh", "-c", "echo $PORT"], allocate_port=True))
    await harness.act(StartOrder(task_id=1, attempt=0))
    await harness.ended()
    running = next(r for r in harness.reports if r.state == "RUNNING")
    assert running.port is not None and 1024 <= running.port <= 65535
    assert (harness.attempt_dir() / "stdout").read_text() == f"{running.port}\n"


async def test_without_allocate_port_there_is_no_port(tmp_path):
    harness = Harness(tmp_path)
    await harness.act(build_order(["sh", "-c", "echo ${PORT:-none}"]))
    await harness.act(StartOrder(task_id=1, attempt=0))
    await harness.ended()
    assert next(r for r in harness.reports if r.state == "RUNNING").port is None
    assert (harness.attempt_dir() / "stdout").read_text() == "none\n"
