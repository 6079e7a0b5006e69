"""`woken`: a loop that waits on it ends when cancelled, even a loop turn after its wake-up. `wait_for`: a blocking
test's poll looks as often as asked."""

from __future__ import annotations

import asyncio

import pytest

from corral.waiting import woken
from tests import waiting
from tests.waiting import wait_for, wait_until


@pytest.mark.parametrize("turns_between_wake_and_cancel", [0, 1, 2, 3])
async def test_a_loop_cancelled_just_after_its_wake_up_ends(turns_between_wake_and_cancel):
    wake = asyncio.Event()
    passes = 0

    async def loop() -> None:  # the shape of the engines' run loops
        nonlocal passes
        while True:
            passes += 1
            wake.clear()
            await woken(wake, 3600)

    task = asyncio.create_task(loop())
    await wait_until(lambda: passes, what="the loop's first pass")
    wake.set()
    for _ in range(turns_between_wake_and_cancel):
        await asyncio.sleep(0)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=5)
    assert task in done and task.cancelled(), f"the loop ran on after its cancel ({passes} passes)"


async def test_says_whether_the_event_was_set_or_the_time_ran_out():
    event = asyncio.Event()
    assert await woken(event, 0) is False
    event.set()
    assert await woken(event, 3600) is True


def test_a_blocking_wait_polls_as_often_as_asked(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(waiting.time, "sleep", slept.append)
    answers = iter([None, None, "done"])
    assert wait_for(lambda: next(answers), 5, "the third look", every=0.5) == "done"
    assert slept == [0.5, 0.5]
