"""The runner obeys preemption orders: SIGTERM, the grace period, SIGKILL, once; checkpoints both ways."""

from __future__ import annotations

import time

import pytest

from corral.core.protocol import PreemptOrder, StartOrder
from tests.waiting import wait_until
from tests.worker.support import CONTAINMENTS, Harness, build_order, gone


@pytest.fixture(params=CONTAINMENTS)
def harness(tmp_path, request):
    return Harness(tmp_path, containment=request.param)


def preempt(epoch: int = 4, grace: float = 10.0, task_id: int = 1, attempt: int = 0) -> PreemptOrder:
    return PreemptOrder(task_id=task_id, attempt=attempt, epoch=epoch, grace_period=grace)


async def started(harness: Harness, script: str, **fields) -> None:
    ready = harness.work_dir / "ready"
    await harness.act(build_order(["sh", "-c", f"{script}"], **fields))
    await harness.act(StartOrder(task_id=1, attempt=0))
    await wait_until(ready.exists, what="the task to be ready")


async def test_a_preempted_task_gets_sigterm_and_the_end_is_acknowledged_with_the_epoch(harness):
    term = harness.work_dir / "term"
    await started(harness, f"trap 'touch {term}; exit 0' TERM; touch {harness.work_dir}/ready; sleep 100 & wait")
    began = time.monotonic()
    await harness.act(preempt(epoch=4, grace=60), timeout=90)
    elapsed = time.monotonic() - began
    assert elapsed < 30 and term.exists(), (elapsed, term.exists())  # it obeyed SIGTERM: no wait for the grace
    report = harness.last()
    assert (report.state, report.epoch, report.exit_code) == ("PREEMPTED", 4, 0)
    assert report.reason == "preempted (epoch 4); exit code 0"


async def test_a_task_that_ignores_sigterm_is_killed_after_the_grace_period(harness):
    pid = harness.work_dir / "pid"
    await started(harness, f"trap '' TERM; echo $$ > {pid}; touch {harness.work_dir}/ready; sleep 100")
    began = time.monotonic()
    await harness.act(preempt(grace=0.5))
    assert time.monotonic() - began >= 0.5
    report = harness.last()
    assert (report.state, report.exit_code) == ("PREEMPTED", 137)
    assert report.reason == "preempted (epoch 4); killed by signal SIGKILL"
    assert gone(int(pid.read_text()))


async def test_repeated_preempt_orders_are_acted_on_once(harness):
    await started(harness, f"touch {harness.work_dir}/ready; sleep 100")
    order = preempt()
    assert harness.runner.submit(order)
    for _ in range(3):
        assert not harness.runner.submit(order)  # the controller repeats it on every heartbeat
    await harness.ended()
    assert harness.states() == ["BUILDING", "PREPARED", "RUNNING", "PREEMPTED"]


async def test_preempting_an_attempt_never_built_here_acknowledges_at_once(harness):
    await harness.act(preempt(epoch=2, task_id=5, attempt=1))
    report = harness.last(5, 1)
    assert (report.state, report.epoch) == ("PREEMPTED", 2)
    await harness.act(build_order(["true"], task_id=5, attempt=1))
    assert harness.states(5, 1) == ["PREEMPTED"]


async def test_a_prepared_attempt_is_preempted_without_a_process(harness):
    await harness.act(build_order(["true"]))
    await harness.act(preempt())
    assert harness.states() == ["BUILDING", "PREPARED", "PREEMPTED"]


async def test_a_task_that_exited_on_its_own_keeps_its_outcome_when_the_preemption_comes_late(harness):
    await harness.act(build_order(["sh", "-c", "exit 3"]))
    await harness.act(StartOrder(task_id=1, attempt=0))
    await harness.ended()
    await harness.act(preempt())
    assert harness.states() == ["BUILDING", "PREPARED", "RUNNING", "FAILED"]


async def test_the_checkpoint_goes_up_on_preemption_and_comes_back_to_the_next_attempt(harness):
    script = (f'cat "$CORRAL_CHECKPOINT_PATH" 2>/dev/null || echo none; '
              f'trap \'echo "step 7" > "$CORRAL_CHECKPOINT_PATH"; exit 0\' TERM; '
              f'touch {harness.work_dir}/ready; sleep 100 & wait')
    await started(harness, script)
    await harness.act(preempt(epoch=1))
    assert harness.saved == [(1, 0, 1, b"step 7\n")]
    (harness.work_dir / "ready").unlink()
    await harness.act(build_order(["sh", "-c", script], attempt=1, checkpoint=True))
    await harness.act(StartOrder(task_id=1, attempt=1))
    await wait_until((harness.work_dir / "ready").exists, what="the next attempt")
    # Its stdout is made by the capture with the first byte, maybe after `ready`: waited for, not looked at once.
    stdout = harness.attempt_dir(1, 1) / "stdout"
    await wait_until(lambda: stdout.exists() and stdout.read_text() == "step 7\n", what="the restored checkpoint")
    # Preempted again without writing a new checkpoint: nothing to upload.
    harness.checkpoints[1] = (harness.attempt_dir(1, 1) / "checkpoint").read_bytes()
    script_unchanged = f"touch {harness.work_dir}/ready2; sleep 100"
    await harness.act(build_order(["sh", "-c", script_unchanged], attempt=2, checkpoint=True))
    await harness.act(StartOrder(task_id=1, attempt=2))
    await wait_until((harness.work_dir / "ready2").exists, what="the third attempt")
    await harness.act(preempt(epoch=3, attempt=2))
    assert len(harness.saved) == 1


async def test_a_refused_checkpoint_is_said_in_the_acknowledgement(harness):
    harness.refuse_checkpoints = "checkpoint refused: HTTP 413 too large"
    await started(harness, f'echo big > "$CORRAL_CHECKPOINT_PATH"; touch {harness.work_dir}/ready; sleep 100')
    await harness.act(preempt(epoch=2))
    report = harness.last()
    assert report.state == "PREEMPTED" and report.reason.endswith("; checkpoint refused: HTTP 413 too large")
