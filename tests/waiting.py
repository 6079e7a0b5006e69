"""Waiting in tests: every wait has a deadline and fails saying what it waited for, never hangs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


async def wait_until(condition: Callable[[], object], timeout: float = 5.0, what: str = "condition") -> object:
    """Poll `condition` on the running loop until it is truthy and return its value; fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)
    return value


async def wait_until_answered(probe: Callable[[], Awaitable[object]], timeout: float = 5.0,
                              what: str = "condition") -> object:
    """`wait_until` for a condition that must await (an HTTP call): polled until truthy; fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while not (value := await probe()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)
    return value


def wait_for(condition: Callable[[], object], timeout: float = 30.0, what: str = "condition",
             every: float = 0.02) -> object:
    """Poll `condition` every `every` seconds from a blocking test until it is truthy and return its value; fail
    after `timeout`."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)
    return value
