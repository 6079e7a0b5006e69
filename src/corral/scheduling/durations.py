"""How long a task runs: what similar jobs took, within its time limit.

Similar means, from the most to the least alike: the same project, command name and resources; the
same project and command name; the same project. The command name is the job's name where it was
given one, else its program and script ("python train.py"). The latest runs of the most alike kind
that has enough of them stand for the task's duration, and the answer says which kind it was, so an
estimate built on it can say what it assumed.

Not only their median: a waiting job starts when the first few of many running tasks end, and
runs are heavy-tailed, so one middle value per running task gets the order of the ends wrong
(measured on the Alibaba trace, docs/performance.md). Each running task takes its own quantile
(`share`, fixed per task, spread evenly over many tasks) of the runs longer than its age, of the
most alike kind that has enough of those: the tasks of a kind end as spread out as its runs did,
and one that outlived most runs of its own kind has joined the long tail of a wider kind. A task
not started yet takes the median (WAITING). A time limit caps what was learned, and stands in
when nothing was; with neither, an hour is guessed (or, past that, a quarter more than its age).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

GUESS = 3600.0  # seconds a task of which nothing is known is taken to run
KEPT_RUNS = 5_000  # the latest runs kept per kind: many, or a burst of short runs just ended hides the long tail
WAITING = 0.5  # the share a task not started yet takes: the median (closer on the trace replay than a quantile each)
ENOUGH = 3  # runs of a kind before they stand for it
OVERDUE = 1.25  # a task older than the guess, with nothing learned, is taken to end after this multiple of its age
GOLDEN = 2654435761  # Knuth's multiplicative hash: consecutive task ids land far apart in [0, 1)

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
    seconds: float  # how long the task runs in all
    basis: str  # what it was taken from, said to users: "its time limit", "the runs of 12 similar jobs", ...


def share_of(task_id: int) -> float:
    """A task's place among its kind's runs, in (0, 1): the same pass after pass (an estimate does not jitter), and
    spread evenly over many tasks."""
    return ((task_id * GOLDEN) % 2**32 + 0.5) / 2**32


class DurationModel:
    def __init__(self, runs: Iterable[Run] = ()) -> None:
        """`runs`: oldest first."""
        self._by: dict[tuple, deque[float]] = defaultdict(lambda: deque(maxlen=KEPT_RUNS))
        for run in runs:
            for key in _keys(run.project, run.command, run.shape):
                self._by[key].append(run.seconds)
        self._sorted: dict[tuple, list[float]] = {}

    def duration(self, project: str, command: str, shape: Shape, share: float, age: float = 0.0,
                 time_limit: float | None = None) -> Duration:
        """How long in all a task of this kind runs that has run `age` seconds: the `share` quantile of the runs
        longer than its age of the most alike kind with enough of them, within its time limit."""
        learned = self._learned(project, command, shape, share, age)
        if learned is None:
            if time_limit is not None:
                return Duration(time_limit, "its time limit")
            if self._by:
                return Duration(max(GUESS, age * OVERDUE), "a guess: it outlived the runs of every similar job")
            return Duration(max(GUESS, age * OVERDUE), "a guess: no similar job has finished yet")
        if time_limit is not None and time_limit < learned.seconds:
            return Duration(time_limit, "its time limit")
        return learned

    def _learned(self, project: str, command: str, shape: Shape, share: float, age: float) -> Duration | None:
        """The quantile among the runs longer than `age` of the most alike kind with enough of them: a task that
        outlived most runs of its own kind is judged by a wider kind, whose long tail it has joined."""
        for key, words in zip(_keys(project, command, shape), ("similar jobs", f"jobs named {command}",
                                                                 f"jobs of project {project}"), strict=True):
            runs = self._by.get(key)
            if runs is None or len(runs) < ENOUGH:
                continue
            if key not in self._sorted:
                self._sorted[key] = sorted(runs)
            ordered = self._sorted[key]
            first = bisect_right(ordered, age)
            longer = len(ordered) - first
            if longer >= ENOUGH:
                return Duration(ordered[first + min(int(share * longer), longer - 1)],
                                f"the runs of {len(ordered)} {words}")
        return None


def command_name(name: str, command: Sequence[str]) -> str:
    """What a job is alike by: its own name where it was given one, else its program and the first argument that
    is not a flag ("python train.py", not "python": every Python job has that name by default)."""
    program = command[0].rsplit("/", 1)[-1] if command else ""
    if name != program[:200]:
        return name
    script = next((arg for arg in command[1:] if not arg.startswith("-")), None)
    return f"{program} {script.rsplit('/', 1)[-1]}" if script else program


def _keys(project: str, command: str, shape: Shape) -> tuple[tuple, tuple, tuple]:
    return (project, command, shape), (project, command), (project,)
