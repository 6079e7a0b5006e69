"""Waiting with a time limit that never swallows a cancel.

On Python 3.11, `asyncio.wait_for` returns normally when its task is cancelled within a loop turn
or two of the awaited thing finishing: a loop cancelled just after a wake-up then runs on, and
whoever awaits its end (a controller shutting down, right after a submission woke its engine)
waits for ever. `asyncio.timeout` has no such window, so corral waits through it; ruff bans
`asyncio.wait_for` in the project's code.
"""

from __future__ import annotations

import asyncio
import contextlib


async def woken(event: asyncio.Event, timeout: float) -> bool:
    """Wait until `event` is set or `timeout` seconds pass; says whether it was set."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()
    return event.is_set()
