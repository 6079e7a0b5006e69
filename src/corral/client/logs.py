"""Reading a task's log by offset, once or following it live, as plans (see `plans`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from corral.client.plans import API, Call, Item, Plan, Sleep
from corral.core.states import TASK_TERMINAL

if TYPE_CHECKING:
    from corral.client.http import Response

TASK_CHECK_INTERVAL = 2.0  # how often a follower of a pinned attempt asks whether the task moved on


def log_chunk(job_id: int, task: int, stream: str, attempt: int | None, offset: int) -> Call:
    params: dict[str, Any] = {"stream": stream, "offset": offset}
    if attempt is not None:
        params["attempt"] = attempt
    return Call("GET", f"{API}/jobs/{job_id}/tasks/{task}/logs", params=params)


def read_logs(job_id: int, task: int, stream: str, attempt: int | None, offset: int = 0) -> Plan[None]:
    """What is stored now; the controller serves a bounded chunk per request, so read until the stored size."""
    while True:
        response = yield log_chunk(job_id, task, stream, attempt, offset)
        attempt = int(response.headers.get("X-Corral-Attempt", attempt or 0))  # later chunks: the same attempt
        data = response.content
        if data:
            yield Item(data)
            offset += len(data)
        if not data or offset >= _size(response, offset + 1):
            return


def follow_logs(job_id: int, task: int, stream: str, attempt: int | None, poll: float,
                on_attempt: Callable[[int], None] | None) -> Plan[None]:
    """Poll until the task is terminal and nothing more arrives.

    Unpinned (`attempt` None), it asks for the task's current attempt each time: when the controller
    answers for a newer one, the old one is drained first, then the new one is read from its start.
    The end is confirmed by two empty reads in a terminal state, since the last bytes of a log may
    reach the controller just after the worker's final report.
    """
    pinned = attempt is not None
    current, offset = attempt, 0
    ended_once = False
    next_check = time.monotonic() + TASK_CHECK_INTERVAL
    while True:
        response = yield log_chunk(job_id, task, stream, current if pinned else None, offset)
        served = int(response.headers.get("X-Corral-Attempt", current or 0))
        if current is None:
            current = served
        if served != current:
            yield from read_logs(job_id, task, stream, current, offset)
            current, offset, ended_once = served, 0, False
            if on_attempt is not None:
                on_attempt(served)
            continue
        data = response.content
        if data:
            yield Item(data)
            offset += len(data)
            ended_once = False
            if offset < _size(response, offset + 1):
                continue
        elif response.headers.get("X-Corral-Task-State") in TASK_TERMINAL:
            if ended_once:
                return
            ended_once = True
        elif pinned and time.monotonic() >= next_check:
            next_check = time.monotonic() + TASK_CHECK_INTERVAL
            tasks = yield Call("GET", f"{API}/jobs/{job_id}/tasks")
            from corral.core.views import TaskView

            if next((t.attempt for t in map(TaskView.model_validate, tasks.json()) if t.index == task),
                    None) != current:
                return  # the pinned attempt is over and drained; the task runs another one
        yield Sleep(poll)


def _size(response: Response, default: int) -> int:
    """The stored size; `default` when the controller did not say."""
    try:
        return int(response.headers["X-Corral-Log-Size"])
    except (KeyError, ValueError):
        return default
