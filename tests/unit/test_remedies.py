"""What would it take, over hand-built situations: one test per kind of remedy, and the cases where nothing helps."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core.config import PoolPolicy, Sequencer
from corral.core.constraints import parse_constraint
from corral.scheduling.forecast import Ending, Situation, Waiting
from corral.scheduling.placement import Request, Unit, WorkerRoom
from corral.scheduling.policy import Policy
from corral.scheduling.preemption import RunningTask
from corral.scheduling.remedies import MAX_FORECASTS, MAX_REMEDIES, clearly_before, what_if

NOW = 1_000.0
GB = 10**9
NO_PREEMPTION = Policy(pools={"default": PoolPolicy(preemption=False)})


def worker(id_: str, gpus: int = 0, free: list[int] | None = None, cpu: float = 8, free_cpu: float | None = None,
           memory: int = 64 * GB, free_memory: int | None = None, pool: str = "default",
           labels: dict[str, str] | None = None) -> WorkerRoom:
    return WorkerRoom(id_, id_, cpu, memory, gpus, cpu if free_cpu is None else free_cpu,
                      memory if free_memory is None else free_memory, list(range(gpus)) if free is None else free,
                      pool=pool, labels=labels or {})


def busy(job: int, worker_id: str, ends_in: float, gpus: int = 0, cpu: float = 1, memory: int = 0,
         priority: int = 0, project: str = "default") -> Ending:
    task = RunningTask(job * 100, job, worker_id, Request(cpu, memory, gpus), tuple(range(gpus)), priority, project,
                       since=NOW - 10)
    return Ending(task, NOW + ends_in)


def pending(job: int = 2, gpus: int = 0, cpu: float = 1, memory: int = 0, tasks: int = 1, priority: int = 0,
            pool: str = "default", constraints: tuple[str, ...] = (), project: str = "default") -> Waiting:
    key = (job, None) if tasks > 1 else (job, job * 100)
    unit = Unit(key, tuple(job * 100 + i for i in range(tasks)), Request(cpu, memory, gpus), pool=pool,
                constraints=tuple(parse_constraint(c) for c in constraints), priority=priority, project=project)
    return Waiting(unit, 600)


def situation(waiting: list[Waiting], rooms: list[WorkerRoom], ending: list[Ending] = (),
              policy: Policy = NO_PREEMPTION) -> Situation:
    return Situation(tuple(waiting), tuple(rooms), tuple(ending), NOW, policy)


def remedy_of(kind: str, answer):
    matching = [r for r in answer.remedies if r.kind == kind]
    assert len(matching) == 1, answer.remedies
    return matching[0]


def test_fewer_gpus_the_most_that_start_now_and_where():
    # 8 GPUs wait an hour for job 41; w3 holds 4 now.
    rooms = [worker("w1", gpus=8, free=[]), worker("w3", gpus=4)]
    answer = what_if(situation([pending(gpus=8)], rooms, [busy(41, "w1", 3600, gpus=8)]), 2)
    assert answer.baseline.start_at == NOW + 3600 and answer.baseline.after_job == 41
    remedy = remedy_of("gpus", answer)
    assert remedy.change == "--gpus 4 instead of 8" and remedy.spec == {"resources": {"gpu": 4}}
    assert remedy.estimate.start_at == NOW and remedy.workers == ("w3",)


def test_fewer_gpus_that_start_sooner_but_not_now():
    # 4 GPUs free at +600 on w2, all 8 only at +3600 on w1.
    rooms = [worker("w1", gpus=8, free=[]), worker("w2", gpus=4, free=[])]
    ending = [busy(41, "w1", 3600, gpus=8), busy(42, "w2", 600, gpus=4)]
    remedy = remedy_of("gpus", what_if(situation([pending(gpus=8)], rooms, ending), 2))
    assert remedy.change == "--gpus 4 instead of 8" and remedy.estimate.start_at == NOW + 600
    assert remedy.workers == ()  # not now: where it would go then is not known


def test_the_gpu_count_is_binary_searched():
    rooms = [worker("w1", gpus=16, free=[]), worker("w2", gpus=8, free=list(range(5)))]
    ending = [busy(41, "w1", 3600, gpus=16, project="other"), busy(42, "w2", 3600, gpus=3, project="other")]
    answer = what_if(situation([pending(gpus=16)], rooms, ending), 2)
    assert remedy_of("gpus", answer).change == "--gpus 5 instead of 16"
    # the baseline, 1 GPU, then a binary search over 2..15 (4), the priority that could overtake job 41 (1)
    assert answer.forecasts <= 1 + 1 + math.ceil(math.log2(15)) + 1


def test_fewer_cpus():
    rooms = [worker("w1", cpu=16, free_cpu=0), worker("w2", cpu=8, free_cpu=6)]
    answer = what_if(situation([pending(cpu=12)], rooms, [busy(41, "w1", 3600, cpu=16)]), 2)
    remedy = remedy_of("cpus", answer)
    assert remedy.change == "--cpus 6 instead of 12" and remedy.spec == {"resources": {"cpu": 6}}
    assert remedy.estimate.start_at == NOW and remedy.workers == ("w2",)


def test_less_memory_where_memory_binds():
    rooms = [worker("w1", memory=64 * GB, free_memory=20 * GB + 5)]
    answer = what_if(situation([pending(memory=32 * GB)], rooms, [busy(41, "w1", 3600, memory=44 * GB - 5)]), 2)
    remedy = remedy_of("memory", answer)
    assert remedy.change == "--memory 20G instead of 32G" and remedy.spec == {"resources": {"memory": 20 * GB}}
    assert remedy.estimate.start_at == NOW


def test_less_memory_is_not_tried_where_memory_does_not_bind():
    # CPUs bind: no worker has 4 cores free, though all have the memory.
    rooms = [worker("w1", cpu=4, free_cpu=0)]
    answer = what_if(situation([pending(cpu=4, memory=GB)], rooms, [busy(41, "w1", 3600, cpu=4)]), 2)
    assert not [r for r in answer.remedies if r.kind == "memory"]


def test_a_job_too_large_in_memory_is_told_the_most_a_worker_has():
    answer = what_if(situation([pending(memory=100 * GB)], [worker("w1", memory=64 * GB)]), 2)
    assert answer.baseline.never
    assert remedy_of("memory", answer).change == "--memory 64G instead of 100G"


def test_another_pool_each_that_could_hold_it():
    rooms = [worker("w1", gpus=1, free=[]), worker("b1", gpus=1, pool="batch"), worker("c1", gpus=1, pool="cpu-only",
                                                                                      free=[]),
             worker("t1", gpus=0, pool="tiny")]
    ending = [busy(41, "w1", 3600, gpus=1, project="other"), busy(42, "c1", 1800, gpus=1, project="other")]
    answer = what_if(situation([pending(gpus=1)], rooms, ending), 2)
    pools = [r for r in answer.remedies if r.kind == "pool"]
    assert [(r.change, r.spec) for r in pools] == [("--pool batch instead of default", {"pool": "batch"}),
                                                   ("--pool cpu-only instead of default", {"pool": "cpu-only"})]
    assert pools[0].estimate.start_at == NOW and pools[0].workers == ("b1",)
    assert pools[1].estimate.start_at == NOW + 1800  # "tiny" has no GPU: never tried


def test_dropping_a_constraint_or_asking_another_value():
    rooms = [worker("a1", gpus=1, free=[], labels={"gpu-model": "A100"}),
             worker("t1", gpus=1, labels={"gpu-model": "T4"}), worker("v1", gpus=1, labels={"gpu-model": "V100"}),
             worker("x1", gpus=1, labels={"zone": "b"})]
    ending = [busy(41, "a1", 3600, gpus=1, project="other")]
    answer = what_if(situation([pending(gpus=1, constraints=("gpu-model=A100", "zone!=b"))], rooms, ending), 2)
    dropped = remedy_of("drop-constraint", answer)
    assert dropped.change == "drop --constraint gpu-model=A100" and dropped.spec == {"constraints": ["zone!=b"]}
    assert dropped.estimate.start_at == NOW
    instead = remedy_of("constraint", answer)
    assert instead.change in ("--constraint gpu-model=T4 instead of gpu-model=A100",
                              "--constraint gpu-model=V100 instead of gpu-model=A100")
    assert instead.spec["constraints"][1] == "zone!=b" and instead.estimate.start_at == NOW
    assert instead.workers in (("t1",), ("v1",))
    assert answer.remedies.index(instead) < answer.remedies.index(dropped)  # the smaller change first


def test_a_job_that_can_never_start_gets_what_makes_it_startable():
    rooms = [worker("t1", gpus=1, labels={"gpu-model": "T4"})]
    answer = what_if(situation([pending(gpus=1, constraints=("gpu-model=H100",))], rooms), 2)
    assert answer.baseline.never and answer.baseline.start_at is None
    assert {r.change for r in answer.remedies} == {"drop --constraint gpu-model=H100",
                                                   "--constraint gpu-model=T4 instead of gpu-model=H100"}


def test_a_higher_priority_the_smallest_and_whom_it_preempts():
    rooms = [worker("w1", gpus=1, free=[]), worker("w2", gpus=1, free=[])]
    ending = [busy(41, "w1", 9000, gpus=1, priority=5, project="other"),
              busy(42, "w2", 9000, gpus=1, priority=10, project="other")]
    answer = what_if(situation([pending(gpus=1)], rooms, ending, policy=Policy()), 2)
    remedy = remedy_of("priority", answer)
    assert remedy.change == "--priority 6 instead of 0" and remedy.spec == {"priority": 6}
    assert remedy.preempts == (41,) and remedy.estimate.start_at <= NOW + 1


def test_a_higher_priority_that_goes_ahead_of_the_queue():
    # No preemption: priority 4 goes ahead of job 3 (priority 3) for the GPU freed at +600.
    rooms = [worker("w1", gpus=1, free=[])]
    ending = [busy(41, "w1", 600, gpus=1, project="other")]
    waiting = [pending(3, gpus=1, priority=3), pending(gpus=1)]
    answer = what_if(situation(waiting, rooms, ending), 2)
    assert answer.baseline.start_at >= NOW + 1200
    remedy = remedy_of("priority", answer)
    assert remedy.change == "--priority 4 instead of 0" and remedy.estimate.start_at == NOW + 600
    assert remedy.preempts == ()


def test_waiting_for_a_job_of_its_own_project_offers_cancelling_it():
    rooms = [worker("w1", gpus=2, free=[])]
    answer = what_if(situation([pending(gpus=2, project="vision")], rooms,
                               [busy(41, "w1", 3600, gpus=2, project="vision")]), 2)
    assert answer.baseline.after_job == 41
    remedy = remedy_of("cancel", answer)
    assert remedy.change == "cancel job 41" and remedy.cancel == 41 and remedy.spec == {}
    assert remedy.estimate.start_at == NOW and remedy.workers == ("w1",)


def test_a_job_of_another_project_is_not_offered_for_cancelling():
    rooms = [worker("w1", gpus=2, free=[])]
    answer = what_if(situation([pending(gpus=2, project="vision")], rooms,
                               [busy(41, "w1", 3600, gpus=2, project="audio")]), 2)
    assert answer.baseline.after_job == 41 and not [r for r in answer.remedies if r.kind == "cancel"]


def test_nothing_helps():
    # One GPU, one core, no constraint, one pool, no preemption, the job holding the room is another project's.
    rooms = [worker("w1", gpus=1, free=[])]
    answer = what_if(situation([pending(gpus=1)], rooms, [busy(41, "w1", 3600, gpus=1, project="other")]), 2)
    assert answer.baseline.start_at == NOW + 3600 and answer.remedies == ()
    assert answer.forecasts == 2  # the baseline, and priority 1 (which overtakes nothing that waits)


def test_a_fifo_pool_tries_no_priority():
    fifo = Policy(pools={"default": PoolPolicy(sequencer=Sequencer.FIFO)})
    rooms = [worker("w1", gpus=1, free=[])]
    answer = what_if(situation([pending(3, gpus=1, priority=3, project="other"), pending(gpus=1)], rooms,
                               [busy(41, "w1", 3600, gpus=1, priority=-5, project="other")], policy=fifo), 2)
    assert answer.remedies == () and answer.forecasts == 1


def test_the_two_pools_that_start_soonest_are_listed():
    rooms = [worker("w1", gpus=1, free=[]), *(worker(f"{p}1", gpus=1, pool=p, free=[]) for p in ("a", "b", "c"))]
    ending = [busy(41, "w1", 9000, gpus=1, project="other"), busy(42, "a1", 3000, gpus=1, project="other"),
              busy(43, "b1", 1000, gpus=1, project="other"), busy(44, "c1", 2000, gpus=1, project="other")]
    answer = what_if(situation([pending(gpus=1)], rooms, ending), 2)
    assert [r.spec["pool"] for r in answer.remedies if r.kind == "pool"] == ["b", "c"]


def test_a_remedy_must_save_a_minute():
    # With 1 GPU it would start 50 s sooner: a sixth of the wait, but under a minute, so not worth listing.
    rooms = [worker("w1", gpus=2, free=[]), worker("w2", gpus=1, free=[])]
    ending = [busy(41, "w1", 300, gpus=2, project="other"), busy(42, "w2", 250, gpus=1, project="other")]
    answer = what_if(situation([pending(gpus=2)], rooms, ending), 2)
    assert answer.baseline.start_at == NOW + 300 and answer.remedies == ()


def test_a_job_that_starts_now_needs_nothing():
    answer = what_if(situation([pending(gpus=8)], [worker("w1", gpus=8)]), 2)
    assert answer.baseline.start_at == NOW and answer.remedies == () and answer.forecasts == 1


def test_a_job_not_pending_is_refused():
    with pytest.raises(ValueError, match="job 9 has no pending task"):
        what_if(situation([pending()], [worker("w1")]), 9)


@pytest.mark.parametrize(("start", "other", "expected"), [
    (NOW, NOW + 30, True),  # now beats anything later
    (NOW, NOW, False),  # nothing beats now
    (NOW + 500, None, True),  # a start beats never
    (None, NOW + 500, False),
    (NOW + 250, NOW + 300, False),  # 50 s sooner: a sixth of the wait, but under a minute
    (NOW + 30_000, NOW + 32_000, False),  # 2000 s of a 32000 s wait: under a tenth
    (NOW + 28_000, NOW + 32_000, True),
])
def test_clearly_before(start, other, expected):
    assert clearly_before(start, other, NOW) is expected


@settings(max_examples=40, deadline=None)
@given(free=st.lists(st.integers(min_value=0, max_value=8), min_size=1, max_size=4),
       ends=st.lists(st.floats(min_value=60, max_value=20_000), min_size=4, max_size=4),
       gpus=st.integers(min_value=1, max_value=8), priorities=st.lists(st.integers(-5, 5), min_size=4, max_size=4))
def test_every_remedy_listed_starts_clearly_sooner(free, ends, gpus, priorities):
    rooms = [worker(f"w{i}", gpus=8, free=list(range(8 - n, 8))) for i, n in enumerate(free)]
    ending = [busy(40 + i, f"w{i}", ends[i], gpus=8 - n, priority=priorities[i], project=f"p{i % 2}")
              for i, n in enumerate(free) if n < 8]
    answer = what_if(situation([pending(gpus=gpus, project="p0")], rooms, ending, policy=Policy()), 2)
    assert len(answer.remedies) <= MAX_REMEDIES and answer.forecasts <= MAX_FORECASTS
    for remedy in answer.remedies:
        assert clearly_before(remedy.estimate.start_at, answer.baseline.start_at, NOW), remedy
