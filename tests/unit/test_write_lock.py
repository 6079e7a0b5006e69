"""The single writer's lock: one holder at a time, a waiting liveness write served before the ordinary ones queued
ahead of it, no lane starved, and a waiter cancelled in line never left holding it."""

from __future__ import annotations

import asyncio

import pytest

from corral.store.write_lock import WriteLock

DEADLINE = 5.0  # seconds any wait of these tests may take


async def queued(lock: WriteLock, served: list[str], name: str, *, liveness: bool = False,
                 release: asyncio.Event | None = None) -> asyncio.Task:
    """A task that takes the lock, notes its name and holds it until `release` (at once without); returned once it
    waits in line or holds the lock."""
    lined_up = asyncio.Event()

    async def take() -> None:
        lined_up.set()
        await lock.acquire(liveness=liveness)  # in line before the caller runs again, or holding it
        served.append(name)
        try:
            if release is not None:
                await release.wait()
        finally:
            lock.release()

    task = asyncio.create_task(take())
    async with asyncio.timeout(DEADLINE):
        await lined_up.wait()
    return task


async def test_a_liveness_write_goes_before_the_ordinary_writes_queued_ahead_of_it():
    lock, served, release = WriteLock(), [], asyncio.Event()
    holder = await queued(lock, served, "holder", release=release)
    ordinary = [await queued(lock, served, f"ordinary-{i}") for i in range(3)]
    mark = await queued(lock, served, "mark", liveness=True)
    release.set()
    async with asyncio.timeout(DEADLINE):
        await asyncio.gather(holder, mark, *ordinary)
    assert served == ["holder", "mark", "ordinary-0", "ordinary-1", "ordinary-2"]


async def test_liveness_writes_back_to_back_do_not_starve_the_others():
    """A liveness writer that queues again as soon as it is done is served after the next ordinary write."""
    lock, served = WriteLock(), []
    first_mark_held, release_first = asyncio.Event(), asyncio.Event()

    async def marks() -> None:
        for turn in range(3):
            async with lock.held(liveness=True):
                served.append(f"mark-{turn}")
                if turn == 0:
                    first_mark_held.set()
                    await release_first.wait()

    marking = asyncio.create_task(marks())
    async with asyncio.timeout(DEADLINE):
        await first_mark_held.wait()
    ordinary = [await queued(lock, served, f"ordinary-{i}") for i in range(2)]
    release_first.set()
    async with asyncio.timeout(DEADLINE):
        await asyncio.gather(marking, *ordinary)
    assert served == ["mark-0", "ordinary-0", "mark-1", "ordinary-1", "mark-2"]


async def test_a_waiter_cancelled_in_line_is_passed_over():
    lock, served, release = WriteLock(), [], asyncio.Event()
    holder = await queued(lock, served, "holder", release=release)
    gone = await queued(lock, served, "gone", liveness=True)
    after = await queued(lock, served, "after")
    gone.cancel()
    release.set()
    async with asyncio.timeout(DEADLINE):
        await asyncio.gather(holder, after)
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert served == ["holder", "after"]
    async with asyncio.timeout(DEADLINE), lock.held():  # free again
        pass


async def test_a_waiter_cancelled_as_it_is_handed_the_lock_passes_it_on():
    lock, served = WriteLock(), []
    await lock.acquire()
    handed = await queued(lock, served, "handed")
    after = await queued(lock, served, "after")
    lock.release()  # handed to the first waiter ...
    handed.cancel()  # ... cancelled before it ran
    with pytest.raises(asyncio.CancelledError):
        await handed
    async with asyncio.timeout(DEADLINE):
        await after
    assert served == ["after"]
