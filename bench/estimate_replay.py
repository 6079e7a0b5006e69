"""`make bench` (start estimates): replays Alibaba's GPU trace with its real durations and scores the estimates.

The truth is a discrete-event replay of the default trace's pods on its 1,213 nodes: a pod
arrives at its creation time and, once placed, runs deletion_time - scheduled_time; at each
event (arrivals and ends at one moment together) the real placement (`place_over`, best fit,
priority order, every pod priority 0, its qos as its project) runs over a CapacityIndex kept
across events, as ScheduleJobs keeps it. The 897 pods the trace never scheduled are skipped
(they have no duration); the 34 still running at the trace's end keep the duration to its end.
Time is simulated, so the wall time does not depend on the time scale: durations stay real
(a "minute" is a real one), and only the arrivals are compressed, by COMPRESS, as the trace
repeated REPEATS times back to back (the file's pods ask for 88% of the cluster's GPUs all
together: without repeats no compression contends it).

The estimates: at each event that leaves a pod waiting that has no estimate yet, but at most
once per EVERY simulated seconds (a forecast over some hundreds pending and 7,600 running costs
about 0.2 s, and in the busiest stretches pods arrive several a second), `forecast` runs over
the pods pending then, the running pods' expected ends and a DurationModel (project: qos;
command: the pod's GPU kind, cpu / share / whole, the trace having no command names; shape:
cpu, memory, gpus) learned from one earlier pass of the trace, as a controller that has run
this workload knows its runs, from the pods ended so far in the replay, and from those running
(each lasting at least its age, as the engine counts the tasks running). A pod's first
estimate (made at its arrival, or at the first forecast after it: at most EVERY seconds or one
event later) is scored against its actual start, for pods that waited over a minute. Three
runs: the learned model; the same with time limits set (the actual duration times a random
factor in [1, 3], rounded up to 10 minutes, capping what was learned); a cold start, learning
only from the pods ended and running in the replay (what ends first are the short runs: a model
learning only from them would be biased short, which counting the running corrects).
`--diagnose` adds a fourth: every pod's actual duration known (the error left is the
simulation's own: order, resolution).
"""

from __future__ import annotations

import argparse
import csv
import heapq
import math
import random
import statistics
import sys
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from bench.trace_replay import DATA, NODES, POOL, load_nodes, load_pods  # noqa: E402
from corral.core.config import PoolPolicy, Strategy  # noqa: E402
from corral.scheduling.capacity import CapacityIndex  # noqa: E402
from corral.scheduling.durations import KEPT_RUNS, WAITING, DurationModel, Run, Still, share_of  # noqa: E402
from corral.scheduling.forecast import Ending, Waiting, forecast  # noqa: E402
from corral.scheduling.placement import Unit, place_over  # noqa: E402
from corral.scheduling.policy import Policy  # noqa: E402
from corral.scheduling.preemption import RunningTask  # noqa: E402
from corral.scheduling.rooms import Request, WorkerRoom  # noqa: E402

PODS = "openb_pod_list_default.csv"
COMPRESS = 6000.0  # arrivals come this many times faster than in the trace
QUIET = 0.01  # the first 1% of pods, spread over the trace's first 116 days, arrive as its busy last 33 days begin
REPEATS = 2  # the trace's pods this many times, each pass after the one before
EVERY = 10.0  # simulated seconds: at most one forecast this often (0: at every event that leaves a pod unestimated)
LONG_WAIT = 60.0  # seconds: the waits the target speaks of
LIMIT_STEP = 600.0  # a time limit is rounded up to this many seconds
HORIZONS = (600.0, 3600.0, 6 * 3600.0, math.inf)  # upper bounds of the horizon buckets
TARGET = 0.20  # the median error, as a share of the actual wait
POLICY = Policy(pools={POOL: PoolPolicy(strategy=Strategy.CONCENTRATED)})


@dataclass(frozen=True)
class TracePod:
    id: int
    request: Request
    project: str  # its qos
    arrives: float
    runs_for: float
    time_limit: float | None = None

    @property
    def command(self) -> str:
        """What the model keys by in place of a command name: the kind of GPU use."""
        return "cpu" if self.request.gpu == 0 else "share" if self.request.share else "whole"

    @property
    def shape(self) -> tuple[float, int, float]:
        return (self.request.cpu, self.request.memory, self.request.gpu)


@dataclass
class Replay:
    """What one replay saw: each pod's actual start and worker, and the estimates made of its start."""

    pods: list[TracePod]
    starts: dict[int, float] = field(default_factory=dict)
    workers: dict[int, str] = field(default_factory=dict)
    gpu_ids: dict[int, tuple[int, ...]] = field(default_factory=dict)
    estimates: dict[int, list[tuple[float, float | None]]] = field(default_factory=lambda: defaultdict(list))
    forecast_seconds: list[float] = field(default_factory=list)  # wall time of each forecast
    pending_seen: list[int] = field(default_factory=list)  # pods pending at each forecast
    # Per forecast, the median of expected / actual: a running pod's time left, a waiting pod's duration.
    left_ratios: list[float] = field(default_factory=list)
    duration_ratios: list[float] = field(default_factory=list)


def load_trace(data: Path, compress: float = COMPRESS, repeats: int = REPEATS) -> list[TracePod]:
    """The trace's scheduled pods, `repeats` times back to back, arrivals compressed by `compress`."""
    path = data / PODS
    with path.open() as f:
        rows = list(csv.DictReader(f))
    chosen = [(pod, row) for pod, row in zip(load_pods(path), rows, strict=True) if row["scheduled_time"]]
    created = sorted(int(row["creation_time"]) for _, row in chosen)
    busy_from = created[int(len(created) * QUIET)]
    span = (created[-1] - busy_from) / compress
    pods = []
    for repeat in range(repeats):
        for pod, row in chosen:
            pods.append(TracePod(len(pods), pod.request, row["qos"],
                                 repeat * span + max(0, int(row["creation_time"]) - busy_from) / compress,
                                 max(1.0, float(int(row["deletion_time"]) - int(row["scheduled_time"])))))
    return pods


def with_limits(pods: list[TracePod], seed: int = 0) -> list[TracePod]:
    """Each pod with a time limit as users set them: its duration times a factor in [1, 3], rounded up to 10 min."""
    draw = random.Random(seed)
    return [TracePod(p.id, p.request, p.project, p.arrives, p.runs_for,
                     math.ceil(p.runs_for * draw.uniform(1, 3) / LIMIT_STEP) * LIMIT_STEP) for p in pods]


class LearnedDurations:
    """The runs ended so far, as a DurationModel: rebuilt when asked after new runs, from only the latest runs of
    each kind it keys by (the model keeps no more of any kind), so a rebuild costs the kinds, not the history."""

    def __init__(self) -> None:
        self._latest: dict[tuple, deque[tuple[int, Run]]] = defaultdict(lambda: deque(maxlen=KEPT_RUNS))
        self._count = 0
        self._model: DurationModel | None = DurationModel()

    def add(self, run: Run) -> None:
        for key in ((run.project, run.command, run.shape), (run.project, run.command), (run.project,)):
            self._latest[key].append((self._count, run))
        self._count += 1
        self._model = None

    def model(self, still: list[Still]) -> DurationModel:
        """What was learned, with these pods running now (each lasting at least its age)."""
        if self._model is None:
            runs = {n: run for latest in self._latest.values() for n, run in latest}
            self._model = DurationModel(runs[n] for n in sorted(runs))
        return self._model.running(still)


def replay(nodes: list[WorkerRoom], pods: list[TracePod], every: float = EVERY, policy: Policy = POLICY,
           history: list[TracePod] = (), known: bool = False) -> Replay:
    """The truth and the estimates in one pass; the estimates change nothing the truth does. The model learns from
    the pods of `history` (as ended before the replay) and from each pod that ends in it."""
    result = Replay(pods)
    index = CapacityIndex(nodes)
    learned = LearnedDurations()
    for pod in history:
        learned.add(Run(pod.project, pod.command, pod.shape, pod.runs_for))
    by_id = {pod.id: pod for pod in pods}
    events = [(pod.arrives, 1, pod.id) for pod in pods]  # (time, 0 end / 1 arrival, pod); ends first
    heapq.heapify(events)
    pending: dict[int, Unit] = {}  # in arrival order
    unestimated: set[int] = set()  # pending pods no forecast has estimated yet
    last_forecast = -math.inf
    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _, kind, pod_id = heapq.heappop(events)
            pod = by_id[pod_id]
            if kind == 0:
                index.remove(pod_id)
                learned.add(Run(pod.project, pod.command, pod.shape, pod.runs_for))
            else:
                pending[pod_id] = Unit((pod_id, pod_id), (pod_id,), pod.request, pool=POOL, project=pod.project,
                                       since=now)
                unestimated.add(pod_id)
        placement = place_over(list(pending.values()), index, policy=policy, now=now)
        for key, assignments in placement.assignments.items():
            pod = by_id[key[0]]
            (assignment,) = assignments
            del pending[pod.id]
            unestimated.discard(pod.id)
            index.add(RunningTask(pod.id, pod.id, assignment.worker_id, pod.request, assignment.gpu_ids, 0,
                                  pod.project, since=now))
            result.starts[pod.id] = now
            result.workers[pod.id], result.gpu_ids[pod.id] = assignment.worker_id, assignment.gpu_ids
            heapq.heappush(events, (now + pod.runs_for, 0, pod.id))
        if unestimated and now - last_forecast >= every:
            last_forecast = now
            unestimated.clear()
            still = [Still(pod.project, pod.command, pod.shape, now - task.since)
                     for task in index.running.values() for pod in (by_id[task.task_id],)]
            _estimate(result, index, pending, None if known else learned.model(still), by_id, now, policy)
    return result


def _estimate(result: Replay, index: CapacityIndex, pending: dict[int, Unit], model: DurationModel | None,
              by_id: dict[int, TracePod], now: float, policy: Policy) -> None:
    """One forecast over the pods pending now; each keeps every estimate made of it, with when it was made. With no
    model, every pod's actual duration is known."""
    def runs_for(pod: TracePod, share: float, age: float) -> float:
        if model is None:
            return pod.runs_for
        return model.duration(pod.project, pod.command, pod.shape, share, age, pod.time_limit).seconds

    waiting = [Waiting(unit, runs_for(by_id[unit.job_id], WAITING, 0.0)) for unit in pending.values()]
    ending = [Ending(task, max(task.since + runs_for(by_id[task.task_id], share_of(task.task_id), now - task.since),
                               now))
              for task in index.running.values()]
    result.left_ratios.append(statistics.median((e.ends_at - now) / max(e.task.since + by_id[e.task.task_id].runs_for
                                                                        - now, 1.0) for e in ending))
    result.duration_ratios.append(statistics.median(w.runs_for / by_id[w.unit.job_id].runs_for for w in waiting))
    started = time.perf_counter()
    estimates = forecast(waiting, index.rooms, ending, now=now, policy=policy)
    result.forecast_seconds.append(time.perf_counter() - started)
    result.pending_seen.append(len(pending))
    for pod_id in pending:
        result.estimates[pod_id].append((now, estimates[pod_id].start_at))


@dataclass(frozen=True)
class Score:
    count: int
    median: float
    p90: float
    unknown: int  # estimates of no start (past the horizon)


def score(result: Replay, low: float = 0.0, high: float = math.inf, first_only: bool = True) -> Score | None:
    """|estimate - actual start| / actual wait over the pods that waited over a minute, of the estimates whose
    horizon (estimate - when made) lies in [low, high); the first estimate of each pod, or all of them (each against
    the wait left when it was made)."""
    errors, unknown = [], 0  # unknown: first estimates with no start, counted once (not per horizon bucket)
    for pod in result.pods:
        start = result.starts[pod.id]
        if start - pod.arrives <= LONG_WAIT:
            continue
        for made_at, estimate in result.estimates.get(pod.id, [])[:1 if first_only else None]:
            if estimate is None:
                unknown += first_only
                continue
            if low <= estimate - made_at < high and start - made_at > 0:
                errors.append(abs(estimate - start) / (start - pod.arrives if first_only else start - made_at))
    if not errors:
        return None
    errors.sort()
    return Score(len(errors), statistics.median(errors), errors[min(len(errors) - 1, int(len(errors) * 0.9))],
                 unknown)


def worst(result: Replay, count: int = 5) -> list[str]:
    """The first estimates furthest off, with the pod's kind and wait: to see which pods the model misjudges."""
    rows = []
    for pod in result.pods:
        wait = result.starts[pod.id] - pod.arrives
        estimates = result.estimates.get(pod.id)
        if wait > LONG_WAIT and estimates and estimates[0][1] is not None:
            estimate = estimates[0][1]
            rows.append((abs(estimate - result.starts[pod.id]) / wait, pod, wait, estimate - pod.arrives))
    rows.sort(key=lambda r: -r[0])
    return [f"pod {pod.id} ({pod.project}, {pod.command}, cpu {pod.request.cpu:g}, gpu {pod.request.gpu:g}): "
            f"waited {wait:.0f} s, estimated {est:.0f} s (error {err:.0%})" for err, pod, wait, est in rows[:count]]


def report(name: str, result: Replay, started: float) -> None:
    waits = [result.starts[p.id] - p.arrives for p in result.pods]
    long = sum(w > LONG_WAIT for w in waits)
    print(f"\n{name}: {len(result.pods)} pods, {long} waited over a minute (median of those "
          f"{statistics.median([w for w in waits if w > LONG_WAIT] or [0]):.0f} s, longest {max(waits):.0f} s); "
          f"{len(result.forecast_seconds)} forecasts, median "
          f"{statistics.median(result.forecast_seconds or [0]) * 1e3:.1f} ms over a median "
          f"{statistics.median(result.pending_seen or [0]):.0f} pending; replay {time.perf_counter() - started:.0f} s")
    if result.forecast_seconds:
        print(f"  expected / actual (median per forecast, then over forecasts): a running pod's time left "
              f"{statistics.median(result.left_ratios):.2f}, a waiting pod's duration "
              f"{statistics.median(result.duration_ratios):.2f}")
    overall = score(result)
    if overall is None:
        print("  no pod waited over a minute with an estimate")
        return
    met = "met" if overall.median < TARGET else "MISSED"
    print(f"  first estimate: median error {overall.median:.0%} of the wait, p90 {overall.p90:.0%}, over "
          f"{overall.count} pods ({overall.unknown} had no start within the horizon); target < {TARGET:.0%}: {met}")
    low = 0.0
    for high in HORIZONS:
        for first_only in (True, False):
            bucket = score(result, low, high, first_only)
            label = "first" if first_only else "all  "
            if bucket is not None:
                print(f"  {label} horizon {_span(low)}-{_span(high)}: median {bucket.median:.0%}, "
                      f"p90 {bucket.p90:.0%}, {bucket.count} estimates")
        low = high
    for line in worst(result):
        print("  worst: " + line)


def _span(seconds: float) -> str:
    if seconds == math.inf:
        return "on"
    return f"{seconds / 3600:g} h" if seconds >= 3600 else f"{seconds / 60:g} min"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="the trace folder")
    parser.add_argument("--compress", type=float, default=COMPRESS, help="arrivals this many times faster")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="the trace's pods this many times")
    parser.add_argument("--every", type=float, default=EVERY, help="simulated seconds between forecasts at least")
    parser.add_argument("--seed", type=int, default=0, help="draws the time limits' factors")
    parser.add_argument("--diagnose", action="store_true",
                        help="two more runs: the model also knowing an earlier pass of the trace, and exact durations")
    args = parser.parse_args()
    if args.compress <= 0 or args.repeats < 1 or args.every < 0:
        parser.error("--compress must be positive, --repeats at least 1, --every not negative")
    if not (args.data / NODES).is_file():
        print(f"estimate_replay: no trace at {args.data} ({NODES} missing); skipped")
        return
    nodes = load_nodes(args.data / NODES)
    pods = load_trace(args.data, args.compress, args.repeats)
    print(f"{len(nodes)} nodes, {sum(n.gpu for n in nodes)} GPUs; {len(pods)} pods ({args.repeats} x the trace's "
          f"scheduled pods), arrivals {args.compress:g}x faster, real durations; a forecast at each event that "
          f"leaves a pod waiting with no estimate yet{f', at most one per {args.every:g} s' if args.every else ''}")
    earlier = pods[:len(pods) // args.repeats]  # one pass of the trace, as ended before the replay: a warm model
    runs = [("learned durations, the model knowing one earlier pass of the trace", pods, earlier, False),
            ("learned durations and time limits (1-3x, rounded up to 10 min), the same model",
             with_limits(pods, args.seed), earlier, False),
            ("learned durations, from the pods ended and running in the replay only (a cold start)", pods, [], False)]
    if args.diagnose:
        runs += [("every pod's actual duration known (what is left is the simulation's own error)", pods, [], True)]
    for name, replayed, history, known in runs:
        started = time.perf_counter()
        report(name, replay(nodes, replayed, args.every, history=history, known=known), started)


if __name__ == "__main__":
    main()
