"""`make bench` (GPU part): replays Alibaba's GPU trace through corral's placement, strategy by strategy.

No processes, no store: the real RoomBook and strategies over the trace's 1,213 nodes. The
method is the one the published figures use (see the data folder's README): pods arrive one by
one and never leave; a pod asks for its cores, memory, and either whole GPUs or, when it takes
one GPU and less than all of it, a share of one device (rounded up to hundredths); `gpu_spec`
limits it to the listed GPU models (a `gpu-model` label on each node). The trace's own pods,
then pods drawn from it with replacement, until the GPUs asked for reach 130% of the cluster's;
the seed draws them and then shuffles the whole list, as the published medians over seeds imply
(in file order, multigpu20's multi-GPU pods would all come last: `--trace-order` keeps the
file's order, then the draws). The share of GPUs left unallocated (1 - allocated/total) is read
as the arrived load passes each mark; a pod that fits nowhere is dropped. The figures are the
median over the seeds. The fragmentation-aware strategy measures against the mix of the file's
GPU pods, as a pool that has long seen this workload would; with `--live-mix`, against the mix a
live pool keeps as the pods arrive (passes of PASS pods, each counted before its pass places it).

Then the decision path: every pod of the default file in its order (a share rounded up to one
GPU), one ScheduleJobs pass per arrival over the capacity index the passes keep (each placement
added to it as the coordinator adds it once on record), best fit, beside a plain best fit (a scan
of the nodes for the fewest free GPUs that hold the pod) over the same pods in the same run.
"""

from __future__ import annotations

import argparse
import csv
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from corral.core.config import PoolPolicy, Strategy  # noqa: E402
from corral.core.constraints import Constraint  # noqa: E402
from corral.core.lifecycle import Target, TaskView  # noqa: E402
from corral.core.states import TaskState  # noqa: E402
from corral.engine.effects import Place  # noqa: E402
from corral.engine.handlers import JobFacts, ScheduleJobs, Snapshot  # noqa: E402
from corral.scheduling.capacity import CapacityIndex  # noqa: E402
from corral.scheduling.fragmentation import Fragmentation, RequestMix  # noqa: E402
from corral.scheduling.policy import Policy  # noqa: E402
from corral.scheduling.preemption import RunningTask  # noqa: E402
from corral.scheduling.rooms import SHARES, Request, RoomBook, WorkerRoom  # noqa: E402
from corral.scheduling.snapshot import ClusterSnapshot, JobPlacement  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "alibaba-gpu-v2023"
NODES = "openb_node_list_gpu_node.csv"
MARKS = (50, 70, 80, 90, 95, 100, 110, 120, 130)
MIB = 2**20
MODEL = "gpu-model"
POOL = "default"
PASS = 100  # pods per scheduling pass with --live-mix
# Unallocated GPUs at 100% arrived load, as published (median of 10 seeds): FGD, best fit.
PUBLISHED = {
    "openb_pod_list_default.csv": (4.77, 7.09),
    "openb_pod_list_cpu050.csv": (5.00, 6.42),
    "openb_pod_list_gpushare40.csv": (6.05, 8.53),
    "openb_pod_list_gpuspec10.csv": (5.30, 6.88),
    "openb_pod_list_multigpu20.csv": (4.47, 6.27),
}
PUBLISHED_DEFAULT = {"random fit": 13.75, "dot product": 9.44, "GPU clustering": 8.42, "GPU packing": 8.19,
                     "best fit": 7.09, "FGD": 4.77}


@dataclass(frozen=True)
class Pod:
    request: Request
    constraints: tuple[Constraint, ...]


def load_nodes(path: Path) -> list[WorkerRoom]:
    with path.open() as f:
        return [WorkerRoom(id=row["sn"], name=row["sn"], cpu=int(row["cpu_milli"]) / 1000,
                           memory=int(row["memory_mib"]) * MIB, gpu=int(row["gpu"]),
                           free_cpu=int(row["cpu_milli"]) / 1000, free_memory=int(row["memory_mib"]) * MIB,
                           free_gpu_ids=list(range(int(row["gpu"]))), pool=POOL, labels={MODEL: row["model"]})
                for row in csv.DictReader(f)]


def load_pods(path: Path) -> list[Pod]:
    pods = []
    with path.open() as f:
        for row in csv.DictReader(f):
            gpus, milli = int(row["num_gpu"]), int(row["gpu_milli"])
            gpu = math.ceil(milli * SHARES / 1000) / SHARES if gpus == 1 and 0 < milli < 1000 else gpus
            spec = (row.get("gpu_spec") or "").strip()
            constraints = (Constraint(MODEL, "in", tuple(spec.split("|"))),) if spec else ()
            pods.append(Pod(Request(cpu=int(row["cpu_milli"]) / 1000, memory=int(row["memory_mib"]) * MIB, gpu=gpu),
                            constraints))
    return pods


def arrivals(pods: list[Pod], total_gpus: int, seed: int, most: float = 1.3, shuffled: bool = True) -> list[Pod]:
    """The trace's pods in order, then draws with replacement until the GPUs asked for reach `most` of the total;
    shuffled, the same pods in an order the seed draws."""
    chosen, asked, draw = [], 0.0, random.Random(seed)
    for pod in pods:
        if asked >= most * total_gpus:
            break
        chosen.append(pod)
        asked += pod.request.gpu
    while asked < most * total_gpus:
        pod = draw.choice(pods)
        chosen.append(pod)
        asked += pod.request.gpu
    if shuffled:
        draw.shuffle(chosen)
    return chosen


def replay(nodes: list[WorkerRoom], pods: list[Pod], strategy: Strategy, mix: RequestMix | None = None,
           marks: tuple[int, ...] = MARKS) -> tuple[dict[int, float], float]:
    """Unallocated GPU share (%) as the arrived load passes each mark, and placements per second.

    Without a `mix`, fragmentation-aware keeps one as a live pool does: the pods arrive in passes of `PASS`, each
    counted in a RequestMix before its pass places it, and each pass measures against the mix so far."""
    total = sum(node.gpu for node in nodes)
    fragmentation_aware = strategy is Strategy.FRAGMENTATION_AWARE
    live = RequestMix() if fragmentation_aware and mix is None else None
    book = RoomBook(nodes, {POOL: Fragmentation(mix.weights(), nodes)} if fragmentation_aware and mix else {})
    asked = allocated = 0.0
    unallocated: dict[int, float] = {}
    pending = list(marks)
    start = time.process_time()
    for n, pod in enumerate(pods):
        if live is not None and n % PASS == 0:
            for arriving in pods[n:n + PASS]:
                live.add(arriving.request, arriving.constraints)
            book = RoomBook(book.rooms, {POOL: Fragmentation(live.weights(), book.rooms)})
        group = book.group(POOL, pod.constraints)
        if book.place(group, pod.request, strategy) is not None:
            allocated += pod.request.gpu
        asked += pod.request.gpu
        while pending and asked >= pending[0] / 100 * total:
            unallocated[pending.pop(0)] = 100 * (1 - allocated / total)
    return unallocated, len(pods) / max(time.process_time() - start, 1e-9)


def whole_gpus(pods: list[Pod]) -> list[Pod]:
    """The pods with a share of one GPU rounded up to the whole device."""
    return [Pod(Request(p.request.cpu, p.request.memory, 1), p.constraints) if p.request.share else p for p in pods]


def replay_decisions(nodes: list[WorkerRoom], pods: list[Pod]) -> tuple[int, list[float]]:
    """Pods placed, and the seconds of each pass: one ScheduleJobs decision per arriving pod over the kept index,
    its placement then added to the index."""
    index, handler, seconds, placed = CapacityIndex(nodes), ScheduleJobs(), [], 0
    policy = Policy(pools={POOL: PoolPolicy(strategy=Strategy.CONCENTRATED)})
    for n, pod in enumerate(pods, 1):
        target = Target(n, False, str(TaskState.PENDING), 0.0, 0, (TaskView(n, 0, TaskState.PENDING),))
        snapshot = Snapshot(float(n), {n: JobFacts(pod.request, 0, None)},
                            ClusterSnapshot(jobs={n: JobPlacement(constraints=pod.constraints)}, policy=policy,
                                            index=index))
        started = time.perf_counter()
        decision = handler.execute([target], snapshot)
        for effect in decision.effects:
            if isinstance(effect, Place):  # on record: the index counts it as running from now
                index.add(RunningTask(effect.task_id, n, effect.worker_id, pod.request, effect.gpu_ids, 0,
                                      since=float(n)))
                placed += 1
        seconds.append(time.perf_counter() - started)
    return placed, seconds


def plain_best_fit(nodes: list[WorkerRoom], pods: list[Pod]) -> tuple[int, float]:
    """Pods placed, and the seconds taken, by a scan of every node for the fewest free GPUs, then cores, that
    hold the pod: the floor a decision is measured against."""
    free = [[len(node.free_gpu_ids), node.free_cpu, node.free_memory, node] for node in nodes]
    placed, started = 0, time.perf_counter()
    for pod in pods:
        request, best = pod.request, None
        for entry in free:
            gpus, cpu, memory, node = entry
            if (gpus >= request.gpu and cpu >= request.cpu and memory >= request.memory
                    and (best is None or (gpus, cpu) < (best[0], best[1]))
                    and all(c.admits(node) for c in pod.constraints)):
                best = entry
        if best is not None:
            best[0] -= request.gpu
            best[1] -= request.cpu
            best[2] -= request.memory
            placed += 1
    return placed, time.perf_counter() - started


def one_pending(nodes: list[WorkerRoom], running: int = 8000, repeats: int = 200) -> tuple[float, float]:
    """Median seconds of one ScheduleJobs decision for one pending one-GPU job on the nodes with `running` one-core
    tasks spread over them: over the kept index, and over the rooms and tasks as read (the index built per pass)."""
    rooms = [node.copy() for node in nodes]
    tasks = []
    for n in range(running):
        room = rooms[n % len(rooms)]
        request = Request(1, 0, 0)
        room.hold(request, ())
        tasks.append(RunningTask(n, n, room.id, request, (), priority=n % 3, project=f"p{n % 7}", since=float(n)))
    policy = Policy(pools={POOL: PoolPolicy(strategy=Strategy.CONCENTRATED)})
    job = running + 1
    target = Target(job, False, str(TaskState.PENDING), 0.0, 0, (TaskView(job, 0, TaskState.PENDING),))
    facts = {job: JobFacts(Request(1, 0, 1), 0, None)}
    kept = CapacityIndex(rooms, tasks)
    timings: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(repeats):
        for over_index in (True, False):
            cluster = ClusterSnapshot(rooms=rooms, running=tasks, jobs={job: JobPlacement()}, policy=policy,
                                      index=kept if over_index else None)
            started = time.perf_counter()
            decision = ScheduleJobs().execute([target], Snapshot(1.0, facts, cluster))
            timings[over_index].append(time.perf_counter() - started)
            assert any(isinstance(e, Place) for e in decision.effects)
    return statistics.median(timings[True]), statistics.median(timings[False])


def decision_path(nodes: list[WorkerRoom], path: Path) -> None:
    kept, rebuilt = one_pending(nodes)
    print(f"\none pending job, {len(nodes)} nodes, 8000 running tasks: ScheduleJobs decides in {kept * 1e3:.3f} ms "
          f"over the kept index, {rebuilt * 1e3:.3f} ms building it from the rooms and tasks read "
          f"({rebuilt / kept:.0f}x); target < 1 ms: {'met' if kept < 1e-3 else 'MISSED'}")
    pods = whole_gpus(load_pods(path))
    placed, seconds = replay_decisions(nodes, pods)
    plain_placed, plain_seconds = plain_best_fit(nodes, pods)
    ordered = sorted(seconds)
    rate, plain_rate = len(pods) / sum(seconds), len(pods) / plain_seconds
    print(f"\n{path.name}, {len(pods)} pods in file order (shares as one GPU), one ScheduleJobs pass per arrival "
          f"over the kept capacity index, best fit: {placed} placed, {rate:.0f} placements/s, per pass median "
          f"{statistics.median(seconds) * 1e3:.3f} ms, p99 {ordered[int(len(ordered) * 0.99)] * 1e3:.3f} ms; "
          f"plain best fit (a scan of the nodes) in the same run: {plain_placed} placed, {plain_rate:.0f} "
          f"placements/s ({rate / plain_rate:.2f}x); target >= 2000 placements/s: "
          f"{'met' if rate >= 2000 else 'MISSED'}")


def run_file(path: Path, nodes: list[WorkerRoom], strategies: list[Strategy], seeds: int, shuffled: bool = True,
             live_mix: bool = False) -> dict[Strategy, tuple[dict[int, float], float]]:
    """Per strategy, the median unallocated share at each mark and placements per second; fragmentation-aware
    measures against the file's mix, or with `live_mix` against the mix kept as the pods arrive."""
    pods = load_pods(path)
    mix = None if live_mix else RequestMix.of(((pod.request, pod.constraints) for pod in pods),
                                              half_life=len(pods) * 100)
    total = sum(node.gpu for node in nodes)
    results = {}
    for strategy in strategies:
        runs = [replay(nodes, arrivals(pods, total, seed, shuffled=shuffled), strategy, mix) for seed in range(seeds)]
        medians = {mark: statistics.median(run[0][mark] for run in runs) for mark in MARKS}
        results[strategy] = (medians, statistics.median(run[1] for run in runs))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="the trace folder")
    parser.add_argument("--seeds", type=int, default=5, help="seeds per strategy and file (the median is shown)")
    parser.add_argument("--quick", action="store_true", help="one seed, the default trace only")
    parser.add_argument("--trace-order", action="store_true", help="the file's pods in its order, then the draws")
    parser.add_argument("--live-mix", action="store_true",
                        help=f"fragmentation-aware keeps its mix as the pods arrive (passes of {PASS}), as a live pool "
                             "does, rather than measuring against the whole file's")
    parser.add_argument("--decisions", action="store_true", help="only the decision path (ScheduleJobs per arrival)")
    args = parser.parse_args()
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    if not (args.data / NODES).is_file():
        print(f"trace_replay: no trace at {args.data} ({NODES} missing); skipped")
        return
    nodes = load_nodes(args.data / NODES)
    if args.decisions:
        decision_path(nodes, args.data / "openb_pod_list_default.csv")
        return
    files = sorted(args.data.glob("openb_pod_list_*.csv"))
    if args.quick:
        files, args.seeds = [args.data / "openb_pod_list_default.csv"], 1
    strategies = list(Strategy)
    order = "the trace's order, then draws" if args.trace_order else "an order each seed draws"
    mix = "the mix kept as pods arrive" if args.live_mix else "the file's mix"
    print(f"{len(nodes)} nodes, {sum(n.gpu for n in nodes)} GPUs; {args.seeds} seed(s); arrivals in {order}; "
          f"fragmentation-aware against {mix}; unallocated GPUs (%) by arrived load (%)")
    for path in files:
        results = run_file(path, nodes, strategies, args.seeds, shuffled=not args.trace_order, live_mix=args.live_mix)
        fgd, best_fit = PUBLISHED.get(path.name, (None, None))
        print(f"\n{path.name}: published at 100%: FGD {fgd}%, best fit {best_fit}%")
        print(f"{'strategy':22}" + "".join(f"{mark:>7}" for mark in MARKS) + f"{'placed/s':>10}")
        for strategy, (medians, rate) in results.items():
            print(f"{strategy.value:22}" + "".join(f"{medians[m]:7.2f}" for m in MARKS) + f"{rate:10.0f}")
        if path.name == "openb_pod_list_default.csv":
            print("published at 100%: " + ", ".join(f"{name} {value}%" for name, value in PUBLISHED_DEFAULT.items()))
    decision_path(nodes, args.data / "openb_pod_list_default.csv")


if __name__ == "__main__":
    main()
