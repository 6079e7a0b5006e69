"""How long a task is expected to run: its time limit where it has one, else what similar jobs took.

Similar means, from the most to the least alike: the same project, command name and resources; the
same project and command name; the same project. The command name is the job's name where it was
given one, else its program and script ("python train.py"). The median of the latest runs of the most alike
kind that has enough of them stands for the task's duration, and says which it was, so an estimate
built on it can say what it assumed. With no history at all, a guess of an hour stands in.
"""

from __future__ import annotations

import statistics
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

GUESS = 3600.0  # seconds a task of which nothing is known is taken to run
KEPT_RUNS = 50  # the latest runs kept per kind: the median follows what jobs take now
ENOUGH = 3  # runs of a kind before its median stands for it
OVERDUE = 1.25  # a task that has run past what was expected is taken to end after this multiple of its age

Shape = tuple[float, int, float]  # cpu, memory, gpu per task


@dataclass(frozen=True)
class Run:
    """One finished attempt, as the model learns from it."""

    project: str
    command: str
    shape: Shape
    seconds: float


@dataclass(frozen=True)
class Duration:
    seconds: float
    basis: str  # what it was taken from, said to users: "its time limit", "the median of 12 similar jobs", ...


class DurationModel:
    def __init__(self, runs: Iterable[Run] = ()) -> None:
        """`runs`: oldest first."""
        self._by: dict[tuple, deque[float]] = defaultdict(lambda: deque(maxlen=KEPT_RUNS))
        for run in runs:
            for key in _keys(run.project, run.command, run.shape):
                self._by[key].append(run.seconds)
        self._medians: dict[tuple, float] = {}

    def expected(self, project: str, command: str, shape: Shape, time_limit: float | None = None) -> Duration:
        """How long a task of this kind runs."""
        if time_limit is not None:
            return Duration(time_limit, "its time limit")
        for key, alike in zip(_keys(project, command, shape), ("similar jobs", f"jobs named {command}",
                                                                 f"jobs of project {project}"), strict=True):
            runs = self._by.get(key)
            if runs is not None and len(runs) >= ENOUGH:
                if key not in self._medians:
                    self._medians[key] = statistics.median(runs)
                return Duration(self._medians[key], f"the median of {len(runs)} {alike}")
        return Duration(GUESS, "a guess: no similar job has finished yet")


def command_name(name: str, command: Sequence[str]) -> str:
    """What a job is alike by: its own name where it was given one, else its program and the first argument that
    is not a flag ("python train.py", not "python": every Python job has that name by default)."""
    program = command[0].rsplit("/", 1)[-1] if command else ""
    if name != program[:200]:
        return name
    script = next((arg for arg in command[1:] if not arg.startswith("-")), None)
    return f"{program} {script.rsplit('/', 1)[-1]}" if script else program


def expected_end(duration: Duration, since: float, now: float, time_limit: float | None = None) -> float:
    """When a task started at `since` is expected to end: a learned duration it has outlived no longer binds it
    (it is taken to run a quarter longer than it has), a time limit does."""
    end = since + duration.seconds
    if end <= now and time_limit is None:
        end = since + (now - since) * OVERDUE
    return max(end, now)


def _keys(project: str, command: str, shape: Shape) -> tuple[tuple, tuple, tuple]:
    return (project, command, shape), (project, command), (project,)
