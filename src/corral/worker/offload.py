"""Blocking calls the worker's event loop hands to threads of their own, where a task's way pays for each one.

`asyncio.to_thread` makes, for every call, a copy of the context, a partial, a `concurrent.futures.Future` (with its
condition and lock), a work item, and has the pool count its idle threads: about four times the CPU of the hand-off
itself (measured: some 30 us of the worker's CPU a call, for a call that does nothing). An attempt's directory is
made this way at every build, so `offload` hands the call over in a tuple on a queue that a few threads of this
module read, and gives its result back through the loop's own future. Like the default executor, as many threads
run as the machine has CPUs, plus four (at most 32); they start with the first call and never block the
interpreter's exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any, TypeVar

T = TypeVar("T")

THREADS = min(32, (os.cpu_count() or 1) + 4)

_queue: SimpleQueue = SimpleQueue()
_started_in: int | None = None  # the pid that started the threads: a forked child starts its own
_start_lock = threading.Lock()


def offload(function: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """`function(*args)` in one of this module's threads; the future (of the running loop) its result or error. A
    cancelled future does not stop the call: it is simply not told."""
    loop = asyncio.get_running_loop()
    if _started_in != os.getpid():
        _start()
    future = loop.create_future()
    _queue.put((loop, future, function, args))
    return future


def _start() -> None:
    global _queue, _started_in
    with _start_lock:
        if _started_in == os.getpid():
            return
        if _started_in is not None:  # a forked child: the parent's queue may hold its calls, and no thread reads it
            _queue = SimpleQueue()
        for index in range(THREADS):
            threading.Thread(target=_serve, args=(_queue,), name=f"corral-offload-{index}", daemon=True).start()
        _started_in = os.getpid()


def _serve(queue: SimpleQueue) -> None:
    while True:
        loop, future, function, args = queue.get()
        try:
            result, error = function(*args), None
        except BaseException as raised:
            result, error = None, raised
        with contextlib.suppress(RuntimeError):  # its loop has closed: no one waits for it any more
            loop.call_soon_threadsafe(_tell, future, result, error)
        del loop, future, function, args, result, error


def _tell(future: asyncio.Future, result: object, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
