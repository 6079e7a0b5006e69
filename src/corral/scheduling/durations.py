"""How long a task runs: what similar jobs took, within its time limit.

Similar means, from the most to the least alike: the same project, command name and resources; the
same project and command name; the same project. The command name is the job's name where it was
given one, else its program and script ("python train.py"). The latest runs of the most alike kind
that has enough of them stand for the task's duration, and the answer says which kind it was, so an
estimate built on it can say what it assumed.

Not their median: a waiting job starts when the first few of many running tasks end, and runs are
heavy-tailed, so one middle value per task gets the order of the ends wrong (measured on the
Alibaba trace, docs/performance.md). Each task takes its own quantile of its kind's runs (`share`,
fixed per task, spread evenly over many tasks): the tasks of a kind end as spread out as its runs
did. A running task takes it among the runs longer than its age (it has outlived the others); one
that outlived them all is taken to run a quarter longer than it has. A time limit caps what was
learned, and stands in when nothing was; with neither, an hour is guessed.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

GUESS = 3600.0  # seconds a task of which nothing is known is taken to run
KEPT_RUNS = 500  # the latest runs kept per kind: enough to hold its long tail, and to follow what jobs take now
ENOUGH = 3  # runs of a kind before they stand for it
OVERDUE = 1.25  # a task that outlived every similar run is taken to end after this multiple of its age
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
        """How long in all a task of this kind runs that has run `age` seconds: the `share` quantile of the alike
        runs longer than its age, within its time limit."""
        alike = self._alike(project, command, shape)
        if alike is None:
            if time_limit is not None:
                return Duration(time_limit, "its time limit")
            return Duration(max(GUESS, age * OVERDUE), "a guess: no similar job has finished yet")
        runs, words = alike
        longer = len(runs) - bisect_right(runs, age)
        if longer:
            learned = Duration(runs[len(runs) - longer + min(int(share * longer), longer - 1)],
                               f"the runs of {len(runs)} {words}")
        else:
            learned = Duration(age * OVERDUE, f"longer than the runs of {len(runs)} {words}")
        if time_limit is not None and time_limit < learned.seconds:
            return Duration(time_limit, "its time limit")
        return learned

    def _alike(self, project: str, command: str, shape: Shape) -> tuple[list[float], str] | None:
        """The runs of the most alike kind with enough of them, sorted, and that kind in words."""
        for key, words in zip(_keys(project, command, shape), ("similar jobs", f"jobs named {command}",
                                                                 f"jobs of project {project}"), strict=True):
            runs = self._by.get(key)
            if runs is not None and len(runs) >= ENOUGH:
                if key not in self._sorted:
                    self._sorted[key] = sorted(runs)
                return self._sorted[key], words
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
