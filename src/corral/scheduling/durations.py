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

The runs that ended are not all there is to learn from: the tasks still running have lasted at
least their age. Counting only the ended runs is biased short, since what ends first is short
(a burst of short runs just ended hides the long tail; a model that has seen few runs has seen
mostly short ones). So the quantiles are read from each kind's Kaplan-Meier estimate, with the
running tasks as censored runs: a task still running at age a counts as "longer than a".
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
class Still:
    """A task still running: it has lasted `age` seconds so far, and will last longer (a censored run)."""

    project: str
    command: str
    shape: Shape
    age: float


@dataclass(frozen=True)
class Survival:
    """A kind's Kaplan-Meier estimate: at each distinct end time, the share of its tasks that run longer."""

    ended: list[float]  # the ended runs' durations, ascending
    times: list[float]  # the distinct end times, ascending
    gone: list[float]  # at each end time, minus the share of tasks running longer (ascending, for bisect)

    def quantile(self, share: float, age: float) -> float | None:
        """The end time by which `share` of the tasks still running at `age` have ended; None where the estimate
        does not reach it (the kind's longest runs are still running)."""
        known = bisect_right(self.times, age)
        left = -self.gone[known - 1] if known else 1.0
        target = left * (1.0 - share) - 1e-9  # the first end after which fewer than this remain
        at = bisect_right(self.gone, -target, lo=known)
        return self.times[at] if at < len(self.times) else None


@dataclass(frozen=True)
class Duration:
    seconds: float  # how long the task runs in all
    basis: str  # what it was taken from, said to users: "its time limit", "the runs of 12 similar jobs", ...


def share_of(task_id: int) -> float:
    """A task's place among its kind's runs, in (0, 1): the same pass after pass (an estimate does not jitter), and
    spread evenly over many tasks."""
    return ((task_id * GOLDEN) % 2**32 + 0.5) / 2**32


class DurationModel:
    def __init__(self, runs: Iterable[Run] = (), still: Iterable[Still] = ()) -> None:
        """`runs`: oldest first; `still`: the tasks running now."""
        self._by: dict[tuple, deque[float]] = defaultdict(lambda: deque(maxlen=KEPT_RUNS))
        for run in runs:
            for key in _keys(run.project, run.command, run.shape):
                self._by[key].append(run.seconds)
        self._ended: dict[tuple, list[float]] = {}  # sorted, per kind
        self._still = _by_kind(still)
        self._survival: dict[tuple, Survival] = {}

    def running(self, still: Iterable[Still]) -> DurationModel:
        """The same ended runs, with these tasks running now (what the engine learns each pass, where the ended
        runs are read once a minute)."""
        other = DurationModel()
        other._by, other._ended, other._still = self._by, self._ended, _by_kind(still)
        return other

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
        """The quantile among the tasks longer than `age` of the most alike kind with enough runs longer than that:
        a task that outlived most runs of its own kind is judged by a wider kind, whose long tail it has joined.
        A quantile past every end seen (the kind's longest tasks are still running) is past the longest end."""
        for key, words in zip(_keys(project, command, shape), ("similar jobs", f"jobs named {command}",
                                                                 f"jobs of project {project}"), strict=True):
            survival = self._survival_of(key)
            if survival is None or len(survival.ended) - bisect_right(survival.ended, age) < ENOUGH:
                continue
            seconds = survival.quantile(share, age)
            if seconds is None:
                return Duration(max(GUESS, survival.ended[-1], age * OVERDUE),
                                f"a guess: longer than the runs of {len(survival.ended)} {words}, whose longest are "
                                "still running")
            return Duration(seconds, f"the runs of {len(survival.ended)} {words}")
        return None

    def _survival_of(self, key: tuple) -> Survival | None:
        if key in self._survival:
            return self._survival[key]
        runs = self._by.get(key)
        if runs is None or len(runs) < ENOUGH:
            return None
        if key not in self._ended:
            self._ended[key] = sorted(runs)
        survival = self._survival[key] = _kaplan_meier(self._ended[key], sorted(self._still.get(key, ())))
        return survival


def _kaplan_meier(ended: list[float], still: list[float]) -> Survival:
    """The product-limit estimate over ended runs and runs still going (both sorted): at each end time t, the share
    running longer shrinks by the ends at t over the tasks that had lasted to t, ended or not."""
    at_risk, left = len(ended) + len(still), 1.0
    times: list[float] = []
    gone: list[float] = []
    i = j = 0
    while i < len(ended):
        t = ended[i]
        while j < len(still) and still[j] < t:
            j += 1
            at_risk -= 1
        ends = 0
        while i < len(ended) and ended[i] == t:
            i += 1
            ends += 1
        left *= 1.0 - ends / at_risk
        times.append(t)
        gone.append(-left)
        at_risk -= ends
    return Survival(ended, times, gone)


def _by_kind(still: Iterable[Still]) -> dict[tuple, list[float]]:
    ages: dict[tuple, list[float]] = defaultdict(list)
    for task in still:
        for key in _keys(task.project, task.command, task.shape):
            ages[key].append(task.age)
    return ages


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
