"""bench/estimate_replay.py on a tiny contended trace of the same shape: the replay's invariants, not its figure."""

from __future__ import annotations

import importlib.util
import random
import sys
from collections import defaultdict
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.scheduling.durations import DurationModel, Run, Still

BENCH = Path(__file__).resolve().parents[2] / "bench" / "estimate_replay.py"
NODES = """sn,cpu_milli,memory_mib,gpu,model
n0,64000,262144,8,G2
n1,16000,65536,2,T4
n2,32000,131072,1,P100
n3,32000,131072,0,CPU
"""
HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
SHAPES = [(4000, 8192, 1, 460), (8000, 16384, 2, 1000), (2000, 4096, 1, 1000), (16000, 32768, 0, 0),
          (1000, 2048, 1, 250)]


def load():
    spec = importlib.util.spec_from_file_location("estimate_replay", BENCH)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny_trace(folder: Path, pods: int = 200, seed: int = 7) -> None:
    """`pods` pods of a few shapes on four nodes, a few never scheduled; many arrive while the nodes are full."""
    draw = random.Random(seed)
    rows, created = [HEADER], 0
    for n in range(pods):
        cpu, memory, gpus, milli = draw.choice(SHAPES)
        created += draw.randint(0, 60)
        runs = draw.choice([30, 120, 300, 900])
        scheduled = "" if n % 50 == 49 else str(created + 5)
        rows.append(f"p{n},{cpu},{memory},{gpus},{milli},,{draw.choice(['LS', 'BE'])},Running,{created},"
                    f"{created + 5 + runs},{scheduled}")
    (folder / "openb_node_list_gpu_node.csv").write_text(NODES)
    (folder / "openb_pod_list_default.csv").write_text("\n".join(rows) + "\n")


def over_capacity(replay, nodes, result) -> list[str]:
    """Every moment a pod starts, what its node holds then, against what the node has: cores, memory, devices."""
    by_node = defaultdict(list)
    for pod in result.pods:
        by_node[result.workers[pod.id]].append(pod)
    problems = []
    for node in nodes:
        here = by_node[node.id]
        for pod in here:
            t = result.starts[pod.id]
            held = [p for p in here if result.starts[p.id] <= t < result.starts[p.id] + p.runs_for]
            if sum(p.request.cpu for p in held) > node.cpu + 1e-6 or sum(p.request.memory for p in held) > node.memory:
                problems.append(f"{node.id} over its cores or memory at {t}")
            devices = defaultdict(int)
            for p in held:
                for device in result.gpu_ids[p.id]:
                    devices[device] += p.request.share or 100
            if any(used > 100 or device >= node.gpu for device, used in devices.items()):
                problems.append(f"{node.id} over a device at {t}: {dict(devices)}")
    return problems


def test_every_pod_starts_no_node_is_overbooked_and_the_waiting_get_estimates(tmp_path: Path) -> None:
    replay = load()
    tiny_trace(tmp_path)
    nodes = replay.load_nodes(tmp_path / replay.NODES)
    pods = replay.load_trace(tmp_path, compress=2.0, repeats=2)
    assert len(pods) == 2 * 196  # the never scheduled are skipped
    one_pass = pods[:196]
    for replayed, history in ((pods, []), (replay.with_limits(pods), []), (pods, one_pass)):
        result = replay.replay(nodes, replayed, every=0.0, history=history)
        assert set(result.starts) == {p.id for p in pods}
        assert all(result.starts[p.id] >= p.arrives for p in pods)
        assert over_capacity(replay, nodes, result) == []
        waited = [p for p in pods if result.starts[p.id] > p.arrives]
        assert len([p for p in waited if result.starts[p.id] - p.arrives > replay.LONG_WAIT]) > 20
        assert all(result.estimates[p.id] for p in waited)  # every=0: a forecast at each event that leaves one waiting
        for pod_id, estimates in result.estimates.items():
            arrives = pods[pod_id].arrives
            assert all(arrives <= made <= result.starts[pod_id] for made, _ in estimates)
            assert all(start is None or start >= made for made, start in estimates)
        assert len(result.forecast_seconds) == len(result.pending_seen) > 0
        overall = replay.score(result)
        assert overall is not None and overall.count > 20 and 0 <= overall.median <= overall.p90


def test_the_capacity_check_sees_a_device_or_cores_held_twice(tmp_path: Path) -> None:
    replay = load()
    tiny_trace(tmp_path)
    nodes = replay.load_nodes(tmp_path / replay.NODES)
    pods = [replay.TracePod(n, replay.Request(10, 0, 1), "LS", 0.0, 100.0) for n in range(2)]
    result = replay.Replay(pods, starts={0: 0.0, 1: 50.0}, workers={0: "n1", 1: "n1"}, gpu_ids={0: (0,), 1: (0,)})
    assert len(over_capacity(replay, nodes, result)) == 2  # device 0 twice, and 20 of n1's 16 cores
    result.gpu_ids[1] = (1,)
    assert len(over_capacity(replay, nodes, result)) == 1
    result.starts[1] = 100.0  # pod 0 has ended by then
    assert over_capacity(replay, nodes, result) == []


def test_time_limits_are_at_least_the_duration_and_whole_ten_minutes() -> None:
    replay = load()
    pods = [replay.TracePod(n, replay.Request(1, 0, 1), "LS", float(n), seconds)
            for n, seconds in enumerate([1.0, 599.0, 600.0, 4000.0, 90_000.0])]
    for pod, limited in zip(pods, replay.with_limits(pods, seed=3), strict=True):
        assert pod.runs_for <= limited.time_limit <= 3 * pod.runs_for + replay.LIMIT_STEP
        assert limited.time_limit % replay.LIMIT_STEP == 0


def test_with_every_duration_known_the_estimates_are_close(tmp_path: Path) -> None:
    """The simulation's own error (order, resolution): far under what a duration model adds."""
    replay = load()
    tiny_trace(tmp_path)
    nodes = replay.load_nodes(tmp_path / replay.NODES)
    result = replay.replay(nodes, replay.load_trace(tmp_path, compress=2.0, repeats=2), known=True)
    assert replay.score(result).median < 0.1


def test_the_horizon_buckets_split_the_estimates_the_score_counts(tmp_path: Path) -> None:
    replay = load()
    pods = [replay.TracePod(n, replay.Request(1, 0, 1), "LS", 0.0, 10.0) for n in range(3)]
    result = replay.Replay(pods, starts={0: 100.0, 1: 5000.0, 2: 30.0})
    result.estimates.update({0: [(0.0, 150.0), (50.0, 100.0)], 1: [(0.0, 4000.0)], 2: [(0.0, 30.0)]})
    overall = replay.score(result)
    assert (overall.count, overall.median) == (2, 0.35)  # 50/100 and 1000/5000; pod 2 waited under a minute
    assert replay.score(result, 0, 600).count == 1 and replay.score(result, 3600, 86400).count == 1
    assert replay.score(result, first_only=False).count == 3  # pod 0's later estimate, right on time


runs = st.lists(st.builds(Run, st.sampled_from(["LS", "BE"]), st.sampled_from(["cpu", "whole"]),
                          st.sampled_from([(1.0, 0, 1.0), (2.0, 0, 0.0), (4.0, 0, 2.0)]),
                          st.floats(1, 1e5)), max_size=300)


stills = st.lists(st.builds(Still, st.sampled_from(["LS", "BE"]), st.sampled_from(["cpu", "whole"]),
                            st.sampled_from([(1.0, 0, 1.0), (2.0, 0, 0.0)]), st.floats(0, 1e5)), max_size=50)


@settings(max_examples=30, deadline=None)
@given(runs, stills)
def test_the_learned_model_answers_as_one_built_from_every_run(history: list[Run], still: list[Still]) -> None:
    replay = load()
    learned = replay.LearnedDurations()
    for run in history:
        learned.add(run)
    whole, model = DurationModel(history, still), learned.model(still)
    for project in ("LS", "BE"):
        for command in ("cpu", "whole", "other"):
            for shape in ((1.0, 0, 1.0), (2.0, 0, 0.0), (8.0, 0, 8.0)):
                for share in (0.1, 0.5, 0.9):
                    assert model.duration(project, command, shape, share) == whole.duration(project, command, shape,
                                                                                            share)
