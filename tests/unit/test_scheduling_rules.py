"""The placement rules over hand-built snapshots: pools, constraints, custom slots, strategies,
sequencers (FIFO, priority, fair share), quotas, reservations (backfill), avoided workers, reasons."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core.config import PoolPolicy, Sequencer, Strategy
from corral.core.constraints import parse_constraint
from corral.scheduling.placement import Unit, place
from corral.scheduling.policy import Policy
from corral.scheduling.preemption import RunningTask
from corral.scheduling.reasons import (
    BehindReservation,
    NoRoom,
    NoWorkerInPool,
    NoWorkerMatches,
    OverQuota,
    Reserved,
)
from corral.scheduling.rooms import Request, WorkerRoom

GiB = 2**30


def room(id_: str, cpu: float = 8, gpus: int = 0, *, pool: str = "default", labels: dict | None = None,
         custom: dict | None = None, free_cpu: float | None = None, free_gpus: list[int] | None = None) -> WorkerRoom:
    return WorkerRoom(id_, id_, cpu, 32 * GiB, gpus, cpu if free_cpu is None else free_cpu, 32 * GiB,
                      list(range(gpus)) if free_gpus is None else free_gpus, pool=pool, labels=labels or {},
                      custom=dict(custom or {}), free_custom=dict(custom or {}))


def task(job: int, cpu: float = 1, gpu: int = 0, *, index: int = 0, custom: tuple = (), **fields) -> Unit:
    task_id = job * 100 + index
    return Unit((job, task_id), (task_id,), Request(cpu, 0, gpu, custom), **fields)


def gang(job: int, n: int, cpu: float = 1, gpu: int = 0, **fields) -> Unit:
    return Unit((job, None), tuple(job * 100 + i for i in range(n)), Request(cpu, 0, gpu), **fields)


def workers_of(result, key) -> list[str]:
    return [a.worker_id for a in result.assignments[key]]


def pools(**policies: PoolPolicy) -> Policy:
    return Policy(pools={name.replace("_", "-"): p for name, p in policies.items()})


# --- pools, labels, custom resources ---------------------------------------------------------------


def test_a_job_runs_only_in_its_pool():
    rooms = [room("cpu1", pool="default"), room("gpu1", gpus=8, pool="a100")]
    result = place([task(1, gpu=1, pool="a100"), task(2)], rooms)
    assert workers_of(result, (1, 100)) == ["gpu1"]
    assert workers_of(result, (2, 200)) == ["cpu1"]


def test_a_pool_with_no_worker_says_so():
    result = place([task(1, pool="tpu")], [room("w1")])
    assert result.waiting[(1, 100)] == NoWorkerInPool("tpu")
    assert result.waiting[(1, 100)].sentence() == "no alive worker in pool tpu; waiting for one to join"


@pytest.mark.parametrize(("text", "labels", "fits"), [
    ("gpu=h100", {"gpu": "h100"}, True),
    ("gpu=h100", {"gpu": "a100"}, False),
    ("gpu=h100", {}, False),
    ("gpu!=h100", {"gpu": "a100"}, True),
    ("gpu!=h100", {}, True),
    ("gpu!=h100", {"gpu": "h100"}, False),
    ("zone in a,b", {"zone": "b"}, True),
    ("zone in a,b", {"zone": "c"}, False),
])
def test_constraints_on_labels(text, labels, fits):
    result = place([task(1, constraints=(parse_constraint(text),))], [room("w1", labels=labels)])
    assert ((1, 100) in result.assignments) is fits


def test_constraints_pick_the_matching_worker_and_explain_a_miss():
    rooms = [room("a", labels={"gpu": "a100", "zone": "a"}), room("h", labels={"gpu": "h100", "zone": "b"})]
    h100 = (parse_constraint("gpu=h100"),)
    result = place([task(1, constraints=h100), task(2, constraints=(parse_constraint("gpu=b200"),))], rooms)
    assert workers_of(result, (1, 100)) == ["h"]
    assert isinstance(result.waiting[(2, 200)], NoWorkerMatches)
    assert result.waiting[(2, 200)].sentence() == "no worker matches constraint gpu=b200"


@pytest.mark.parametrize(("text", "canonical"), [
    ("gpu=h100", "gpu=h100"), ("gpu == h100", "gpu=h100"), ("gpu != h100", "gpu!=h100"),
    ("zone in a,b", "zone in a,b"), ("zone in (a, b)", "zone in a,b"),
])
def test_constraint_text_round_trips(text, canonical):
    assert str(parse_constraint(text)) == canonical


@pytest.mark.parametrize("text", ["", "gpu", "=h100", "gpu in", "gpu ~ h100"])
def test_bad_constraints_are_refused(text):
    with pytest.raises(ValueError, match="not a constraint"):
        parse_constraint(text)


def test_custom_resource_slots_are_counted_like_cores():
    rooms = [room("plain"), room("tpu-box", custom={"tpu": 4})]
    units = [task(j, custom=(("tpu", 2.0),)) for j in (1, 2, 3)]
    result = place(units, rooms)
    assert workers_of(result, (1, 100)) == workers_of(result, (2, 200)) == ["tpu-box"]
    assert result.waiting[(3, 300)].sentence() == "needs 2 tpu on one worker; no worker has any tpu free"


def test_a_custom_slot_no_worker_has_is_too_large():
    result = place([task(1, custom=(("fpga", 1.0),))], [room("w1", custom={"tpu": 4})])
    assert result.waiting[(1, 100)].sentence() == (
        "needs 1 fpga per task; no worker has that much (largest: 0 fpga on w1); waiting for one to join")


# --- strategies ------------------------------------------------------------------------------------


def test_concentrated_fills_the_fullest_worker_and_keeps_big_holes():
    rooms = [room("big", gpus=8), room("half", gpus=8, free_gpus=[0, 1]), room("small", gpus=8, free_gpus=[0])]
    result = place([task(1, gpu=1), task(2, gpu=2), task(3, gpu=8)], rooms)
    assert workers_of(result, (1, 100)) == ["small"]
    assert workers_of(result, (2, 200)) == ["half"]
    assert workers_of(result, (3, 300)) == ["big"]  # the hole was kept whole


def test_dispersed_spreads_the_load():
    rooms = [room("w1", cpu=8), room("w2", cpu=8), room("w3", cpu=8)]
    policy = pools(default=PoolPolicy(strategy=Strategy.DISPERSED))
    result = place([task(j) for j in range(1, 7)], rooms, policy=policy)
    used = [workers_of(result, (j, j * 100))[0] for j in range(1, 7)]
    assert sorted(used) == ["w1", "w1", "w2", "w2", "w3", "w3"]


def test_concentrated_packs_the_same_tasks_on_few_workers():
    rooms = [room("w1", cpu=8), room("w2", cpu=8), room("w3", cpu=8)]
    result = place([task(j) for j in range(1, 7)], rooms)
    assert {workers_of(result, (j, j * 100))[0] for j in range(1, 7)} == {"w1"}


def test_round_robin_takes_workers_in_turn():
    rooms = [room("w1"), room("w2"), room("w3")]
    policy = pools(default=PoolPolicy(strategy=Strategy.ROUND_ROBIN))
    result = place([task(j) for j in range(1, 5)], rooms, policy=policy)
    assert [workers_of(result, (j, j * 100))[0] for j in range(1, 5)] == ["w1", "w2", "w3", "w1"]


def test_a_spread_gang_puts_one_task_per_worker():
    rooms = [room("w1", cpu=8), room("w2", cpu=8), room("w3", cpu=8)]
    result = place([gang(1, 3, spread=True)], rooms)
    assert sorted(workers_of(result, (1, None))) == ["w1", "w2", "w3"]
    waiting = place([gang(2, 4, spread=True)], rooms).waiting[(2, None)]
    assert isinstance(waiting, NoRoom) and waiting.placeable == 3


def test_a_retried_task_avoids_the_worker_it_failed_on_when_another_fits():
    rooms = [room("w1", cpu=2), room("w2", cpu=8)]
    assert workers_of(place([task(1, avoid=frozenset({"w1"}))], rooms), (1, 100)) == ["w2"]
    # With no other worker with room, the failed one is still better than waiting.
    rooms = [room("w1", cpu=2), room("w2", cpu=8, free_cpu=0)]
    assert workers_of(place([task(1, avoid=frozenset({"w1"}))], rooms), (1, 100)) == ["w1"]


# --- sequencers ------------------------------------------------------------------------------------


def test_priority_sequencer_offers_room_to_the_highest_first():
    rooms = [room("w1", cpu=2)]
    units = [task(1, cpu=2, priority=0), task(2, cpu=2, priority=100), task(3, cpu=2, priority=100)]
    result = place(units, rooms)
    assert list(result.assignments) == [(2, 200)]  # then FIFO among equals


def test_fifo_sequencer_ignores_priority():
    policy = pools(default=PoolPolicy(sequencer=Sequencer.FIFO))
    units = [task(1, cpu=2, priority=0), task(2, cpu=2, priority=100)]
    assert list(place(units, [room("w1", cpu=2)], policy=policy).assignments) == [(1, 100)]


def test_fair_share_alternates_between_projects():
    policy = pools(default=PoolPolicy(sequencer=Sequencer.FAIR_SHARE))
    units = [task(j, project="a") for j in range(1, 11)] + [task(j, project="b") for j in range(11, 21)]
    result = place(units, [room("w1", cpu=6)], policy=policy)
    projects = sorted(u.project for u in units if u.key in result.assignments)
    assert projects == ["a", "a", "a", "b", "b", "b"]


def test_fair_share_counts_what_a_project_already_runs():
    policy = pools(default=PoolPolicy(sequencer=Sequencer.FAIR_SHARE))
    running = [RunningTask(900 + i, 90, "w1", Request(1, 0, 0), (), 0, project="a") for i in range(4)]
    units = [task(j, project="a") for j in range(1, 5)] + [task(j, project="b") for j in range(5, 9)]
    result = place(units, [room("w1", cpu=8, free_cpu=4)], policy=policy, running=running)
    assert sorted(u.project for u in units if u.key in result.assignments) == ["b", "b", "b", "b"]


def test_fair_share_uses_the_dominant_resource():
    policy = pools(default=PoolPolicy(sequencer=Sequencer.FAIR_SHARE))
    # Project a runs 1 of 2 GPUs (share 1/2); b runs 4 of 16 cores (1/4): b goes first.
    running = [RunningTask(900, 90, "w1", Request(1, 0, 1), (0,), 0, project="a"),
               RunningTask(901, 91, "w1", Request(4, 0, 0), (), 0, project="b")]
    units = [task(1, project="a"), task(2, project="b")]
    result = place(units, [room("w1", cpu=16, gpus=2, free_cpu=11, free_gpus=[1])], policy=policy,
                   running=running)
    assert list(result.assignments)[0] == (2, 200)


# --- no head-of-line blocking, reservations (backfill) ----------------------------------------------


def test_a_big_job_does_not_block_small_ones_before_its_reservation_time():
    rooms = [room("w1", cpu=4, free_cpu=2), room("w2", cpu=4, free_cpu=2)]
    policy = pools(default=PoolPolicy(reservation_time=60))
    result = place([task(1, cpu=4, since=0), task(2, cpu=1), task(3, cpu=1)], rooms, policy=policy, now=30)
    assert set(result.assignments) == {(2, 200), (3, 300)}
    assert isinstance(result.waiting[(1, 100)], NoRoom)


def test_past_its_reservation_time_room_is_held_and_only_jobs_elsewhere_start():
    rooms = [room("w1", cpu=4, free_cpu=3), room("w2", cpu=4, free_cpu=1)]
    policy = pools(default=PoolPolicy(reservation_time=60))
    units = [task(1, cpu=4, since=0), task(2, cpu=2), task(3, cpu=1)]
    result = place(units, rooms, policy=policy, now=61)
    reserved = result.waiting[(1, 100)]
    assert isinstance(reserved, Reserved) and reserved.workers == ("w1",)
    assert reserved.sentence() == (
        "needs 4 cpu on one worker; most free on one worker: 3 cpu (w1); room held for it on w1")
    assert result.waiting[(2, 200)] == BehindReservation(1)
    assert result.waiting[(2, 200)].sentence() == "waiting behind reservation for job 1"
    assert workers_of(result, (3, 300)) == ["w2"]  # backfill: it does not touch w1


def test_no_reservation_time_means_never_reserve():
    rooms = [room("w1", cpu=4, free_cpu=3)]
    result = place([task(1, cpu=4, since=0), task(2, cpu=1)], rooms, now=10**6)
    assert (2, 200) in result.assignments


# --- quotas ----------------------------------------------------------------------------------------


def test_a_job_over_its_project_quota_waits_with_the_numbers():
    policy = Policy(quotas={"vision": {"gpu": 8}})
    running = [RunningTask(900 + i, 90, "w1", Request(1, 0, 1), (i,), 0, project="vision") for i in range(6)]
    rooms = [room("w1", gpus=8, free_gpus=[6, 7]), room("w2", gpus=8)]
    units = [task(1, gpu=2, project="vision"), task(2, gpu=1, project="vision"), task(3, gpu=4, project="nlp")]
    result = place(units, rooms, policy=policy, running=running)
    assert (1, 100) in result.assignments  # 6 + 2 = 8: at the limit, allowed
    assert result.waiting[(2, 200)] == OverQuota("vision", "gpu", 8, 8, 1)
    assert result.waiting[(2, 200)].sentence() == "over project quota: gpu 8/8 (project vision asks 1 gpu more)"
    assert (3, 300) in result.assignments  # another project is not held back


def test_a_gang_counts_all_its_tasks_against_the_quota():
    policy = Policy(quotas={"p": {"cpu": 3}})
    result = place([gang(1, 4, project="p")], [room("w1")], policy=policy)
    assert isinstance(result.waiting[(1, None)], OverQuota)


# --- properties over every policy -------------------------------------------------------------------


@st.composite
def policy_worlds(draw):
    rooms = []
    for i in range(draw(st.integers(1, 6))):
        gpus = draw(st.integers(0, 4))
        custom = {"tpu": float(draw(st.integers(0, 4)))}
        rooms.append(WorkerRoom(f"w{i}", f"w{i}", 4.0, 8 * GiB, gpus, draw(st.sampled_from([0.0, 2.0, 4.0])),
                                8 * GiB, list(range(gpus)), pool=draw(st.sampled_from(["default", "x"])),
                                labels={"zone": draw(st.sampled_from(["a", "b"]))}, custom=custom,
                                free_custom=dict(custom)))
    units, next_task = [], 0
    for j in range(draw(st.integers(0, 12))):
        n = draw(st.integers(1, 3))
        request = Request(draw(st.sampled_from([0.5, 1.0, 2.0])), draw(st.integers(0, 2)) * GiB,
                          draw(st.integers(0, 2)), draw(st.sampled_from([(), (("tpu", 1.0),), (("tpu", 3.0),)])))
        ids = tuple(range(next_task, next_task + n))
        next_task += n
        constraints = draw(st.sampled_from([(), (parse_constraint("zone=a"),), (parse_constraint("zone!=a"),)]))
        key = (j, None) if n > 1 else (j, ids[0])
        units.append(Unit(key, ids, request, pool=draw(st.sampled_from(["default", "x"])),
                          constraints=constraints, spread=draw(st.booleans()), priority=draw(st.integers(0, 2)),
                          project=draw(st.sampled_from(["p", "q"])), since=draw(st.sampled_from([0.0, 50.0]))))
    pool_policy = PoolPolicy(strategy=draw(st.sampled_from(list(Strategy))),
                             sequencer=draw(st.sampled_from(list(Sequencer))),
                             reservation_time=draw(st.sampled_from([None, 10.0])))
    quotas = draw(st.sampled_from([{}, {"p": {"gpu": 2.0}}, {"q": {"cpu": 3.0, "tpu": 2.0}}]))
    return rooms, units, Policy(pools={"default": pool_policy, "x": pool_policy}, quotas=quotas)


@settings(max_examples=300, deadline=None)
@given(policy_worlds())
def test_no_policy_overcommits_shares_a_device_or_splits_a_gang(world):
    rooms, units, policy = world
    result = place(units, rooms, policy=policy, now=100.0)
    by_id = {r.id: r for r in rooms}
    use = defaultdict(lambda: defaultdict(float))
    gpus = defaultdict(list)
    per_project = defaultdict(lambda: defaultdict(float))
    for unit in units:
        assert (unit.key in result.assignments) != (unit.key in result.waiting)
        if unit.key not in result.assignments:
            assert result.waiting[unit.key].sentence()
            continue
        placed = result.assignments[unit.key]
        assert sorted(a.task_id for a in placed) == sorted(unit.task_ids), "a gang is placed whole or not at all"
        if unit.spread:
            assert len({a.worker_id for a in placed}) == len(placed)
        for a in placed:
            worker = by_id[a.worker_id]
            assert worker.pool == unit.pool and all(c.matches(worker.labels) for c in unit.constraints)
            for resource, amount in unit.request.amounts().items():
                use[a.worker_id][resource] += amount
                per_project[unit.project][resource] += amount
            gpus[a.worker_id].extend(a.gpu_ids)
    for worker_id, used in use.items():
        for resource, amount in used.items():
            assert amount <= by_id[worker_id].free(resource) + 1e-9, (worker_id, resource)
    for worker_id, ids in gpus.items():
        assert len(ids) == len(set(ids)) and set(ids) <= set(by_id[worker_id].free_gpu_ids), "a device shared"
    for project, limits in policy.quotas.items():
        for resource, limit in limits.items():
            assert per_project[project][resource] <= limit + 1e-9


def test_only_the_first_overdue_unit_of_a_kind_reserves():
    rooms = [room(f"w{i}", cpu=4, free_cpu=1) for i in range(4)]
    policy = pools(default=PoolPolicy(reservation_time=60))
    units = [task(j, cpu=4, since=0) for j in (1, 2, 3)] + [task(4, cpu=1)]
    result = place(units, rooms, policy=policy, now=100)
    assert isinstance(result.waiting[(1, 100)], Reserved) and result.waiting[(1, 100)].workers == ("w0",)
    assert result.waiting[(2, 200)] == result.waiting[(3, 300)] == BehindReservation(1)
    assert workers_of(result, (4, 400)) == ["w1"]  # the rest of the cluster is not held


def test_round_robin_goes_on_after_the_worker_that_got_the_last_task():
    rooms = [room("w1"), room("w2"), room("w3")]
    policy = pools(default=PoolPolicy(strategy=Strategy.ROUND_ROBIN))
    running = [RunningTask(900, 90, "w1", Request(1, 0, 0), (), 0, since=10.0),
               RunningTask(901, 91, "w2", Request(1, 0, 0), (), 0, since=20.0)]
    result = place([task(1), task(2)], rooms, policy=policy, running=running)
    assert [workers_of(result, (j, j * 100))[0] for j in (1, 2)] == ["w3", "w1"]
