"""Turning numbers and states into the short strings a table cell can hold."""

from __future__ import annotations

import shlex
import time
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from corral.core.spec_text import format_bytes
from corral.core.states import TaskState

if TYPE_CHECKING:
    from corral.core.spec import Resources

_TASK_ORDER = {state: i for i, state in enumerate(TaskState)}


def format_age(seconds: float) -> str:
    """5s, 3m, 2h, 4d: the largest whole unit, like kubectl's AGE column."""
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def age_since(at: float | None, now: float | None = None) -> str:
    return "-" if at is None else format_age((time.time() if now is None else now) - at)


def format_duration(seconds: float | None) -> str:
    """90.0 -> 1m30s; finer than an age, for time limits and how long an attempt ran."""
    if seconds is None:
        return "-"
    whole = int(round(seconds))
    if whole < 60:
        return f"{seconds:.3g}s" if seconds < 10 else f"{whole}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if whole >= size:
            parts.append(f"{whole // size}{unit}")
            whole %= size
    return "".join(parts[:2])


def format_number(value: float) -> str:
    return f"{value:g}"


def format_time(at: float | None) -> str:
    if at is None:
        return "-"
    moment = datetime.fromtimestamp(at)
    today = datetime.now().date() == moment.date()
    return moment.strftime("%H:%M:%S" if today else "%Y-%m-%d %H:%M:%S")


def task_summary(counts: Mapping[str, int]) -> str:
    """"3 RUNNING, 1 PENDING": the most numerous first, ties in lifecycle order."""
    items = [(TaskState(state), n) for state, n in counts.items() if n]
    items.sort(key=lambda item: (-item[1], _TASK_ORDER[item[0]]))
    return ", ".join(f"{n} {state}" for state, n in items) or "-"


def format_resources(resources: Resources) -> str:
    text = f"cpu {format_number(resources.cpu)}"
    text += f", mem {format_bytes(resources.memory)}" if resources.memory else ""
    text += f", gpu {resources.gpu}" if resources.gpu else ""
    return text + (f" ({format_bytes(resources.gpu_memory)}+ each)" if resources.gpu_memory else "")


def format_command(command: list[str]) -> str:
    return shlex.join(command)
