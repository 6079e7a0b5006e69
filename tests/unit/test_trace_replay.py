"""bench/trace_replay.py on a tiny trace of the same shape, so that the replay cannot rot."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from corral.core.config import Strategy

BENCH = Path(__file__).resolve().parents[2] / "bench" / "trace_replay.py"
NODES = """sn,cpu_milli,memory_mib,gpu,model
n0,64000,262144,8,G2
n1,16000,65536,2,T4
n2,32000,131072,1,P100
"""
PODS = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
p0,4000,8192,1,460,,LS,Running,0,1,0
p1,8000,16384,2,1000,,LS,Running,1,2,1
p2,2000,4096,1,1000,T4|P100,LS,Running,2,3,2
p3,16000,32768,0,0,,BE,Running,3,4,3
p4,1000,2048,1,255,,LS,Running,4,5,4
"""


def load():
    spec = importlib.util.spec_from_file_location("trace_replay", BENCH)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_replay_reads_the_trace_and_reports_every_mark_for_every_strategy(tmp_path: Path) -> None:
    replay = load()
    (tmp_path / replay.NODES).write_text(NODES)
    (tmp_path / "openb_pod_list_tiny.csv").write_text(PODS)
    nodes = replay.load_nodes(tmp_path / replay.NODES)
    pods = replay.load_pods(tmp_path / "openb_pod_list_tiny.csv")
    assert [n.gpu for n in nodes] == [8, 2, 1] and nodes[0].labels == {"gpu-model": "G2"}
    assert [p.request.gpu for p in pods] == [0.46, 2, 1, 0, 0.26]  # a share rounds up to hundredths
    assert pods[2].constraints[0].values == ("T4", "P100") and not pods[0].constraints
    arrived = replay.arrivals(pods, 11, seed=1, shuffled=False)
    shuffled = replay.arrivals(pods, 11, seed=1)
    assert sorted(map(id, shuffled)) == sorted(map(id, arrived))  # the same pods, in another order
    assert arrived[:5] == pods and sum(p.request.gpu for p in arrived) >= 1.3 * 11
    results = replay.run_file(tmp_path / "openb_pod_list_tiny.csv", nodes, list(Strategy), seeds=2)
    for medians, rate in results.values():
        assert set(medians) == set(replay.MARKS) and all(0 <= v <= 100 for v in medians.values()) and rate > 0


def test_the_live_mix_replay_counts_each_pass_before_placing_it(tmp_path: Path) -> None:
    replay = load()
    (tmp_path / replay.NODES).write_text(NODES)
    (tmp_path / "openb_pod_list_tiny.csv").write_text(PODS)
    nodes = replay.load_nodes(tmp_path / replay.NODES)
    results = replay.run_file(tmp_path / "openb_pod_list_tiny.csv", nodes, [Strategy.FRAGMENTATION_AWARE], seeds=1,
                              live_mix=True)
    medians, rate = results[Strategy.FRAGMENTATION_AWARE]
    assert set(medians) == set(replay.MARKS) and rate > 0
    assert medians[50] < 50  # with a mix from the first pass on, the pods are placed
