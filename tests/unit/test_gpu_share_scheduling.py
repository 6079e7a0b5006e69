"""Shares of one GPU in what surrounds placement (DESIGN.md, Scheduling): why a share waits, quotas and fair share,
priority preemption, reservations, and the router's fit over the pool."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.controller.admission import job_total
from corral.core.config import PoolPolicy, Sequencer
from corral.core.deployment_spec import DeploymentSpec
from corral.core.serving import Catalog, DeploymentFacts, DeploymentState, Endpoint
from corral.core.spec import JobSpec
from corral.scheduling.analysis import judge_workers
from corral.scheduling.placement import Request, Unit, WorkerRoom, place
from corral.scheduling.policy import Policy, over_pool_maximum
from corral.scheduling.preemption import RunningTask, choose_victims
from corral.scheduling.reasons import (
    BehindReservation,
    Moving,
    NoRoom,
    OverQuota,
    Preempting,
    Reserved,
    TooLarge,
    format_amount,
)
from corral.scheduling.rooms import SHARES
from corral.scheduling.snapshot import JobPlacement
from corral.serving.policies import FitPolicy
from corral.serving.pool import Holding, Pool
from corral.serving.router import Router, request_of

GB = 10**9


def room(id_: str, memories: tuple[int, ...] = (0,), shared: dict[int, int] | None = None,
         reserved: dict[int, int] | None = None, busy: tuple[int, ...] = (), cpu: float = 16) -> WorkerRoom:
    """A worker whose device i has memories[i] bytes (0: unknown); `shared`: hundredths its shares use per device,
    `reserved`: the bytes they reserve; `busy`: devices a whole task holds."""
    shared = shared or {}
    free = [d for d in range(len(memories)) if d not in shared and d not in busy]
    return WorkerRoom(id_, id_, cpu, 64 * GB, len(memories), cpu, 64 * GB, free,
                      gpu_memory=memories if any(memories) else (), gpu_shared=dict(shared),
                      gpu_memory_shared=dict(reserved or {}))


def share(gpu: float, gpu_memory: int = 0) -> Request:
    return Request(1, 0, gpu, gpu_memory=gpu_memory)


def one(job: int, request: Request, **fields) -> Unit:
    return Unit((job, job * 100), (job * 100,), request, **fields)


def running(task_id: int, worker: str, request: Request, device: int, priority: int = 0, **fields) -> RunningTask:
    return RunningTask(task_id, task_id, worker, request, (device,), priority, **fields)


# --- why a share waits -----------------------------------------------------------------------------


def test_amounts_of_gpu_print_as_hundredths_and_a_share_says_it_is_one():
    assert format_amount("gpu", 0.1 + 0.2) == "0.3 gpu (a share of one device)"
    assert format_amount("gpu", 0.5, 20 * GB) == "0.5 gpu (a share of one device, reserving 20G of its memory)"
    assert format_amount("gpu", 0.7 * 3) == "2.1 gpu"
    assert format_amount("gpu", 1, 40 * GB) == "1 gpu with at least 40G memory"


def test_a_share_that_no_device_has_room_for_names_the_most_one_device_has_free():
    rooms = [room("w1", shared={0: 90}), room("w3", (0, 0), shared={0: 75, 1: 80})]
    reason = place([one(1, share(0.5))], rooms).waiting[(1, 100)]
    assert isinstance(reason, NoRoom)
    assert reason.sentence() == ("needs 0.5 gpu (a share of one device) on one worker; "
                                 "the most any device has free is 0.25, on w3")


def test_a_share_with_memory_names_what_each_device_has_left():
    rooms = [room("w3", (24 * GB, 80 * GB), shared={0: 50, 1: 75}, reserved={0: 20 * GB, 1: 40 * GB})]
    reason = place([one(1, share(0.5, 20 * GB))], rooms).waiting[(1, 100)]
    assert reason.sentence() == (
        "needs 0.5 gpu (a share of one device, reserving 20G of its memory) on one worker; the most any device "
        "with 20G left has free is 0.25, on w3 (w3 has 1 device with 0.5 gpu and 4G free, "
        "1 device with 0.25 gpu and 40G free)")
    tight = [room("w3", (24 * GB,), shared={0: 50}, reserved={0: 20 * GB})]
    assert place([one(1, share(0.5, 20 * GB))], tight).waiting[(1, 100)].sentence() == (
        "needs 0.5 gpu (a share of one device, reserving 20G of its memory) on one worker; no device "
        "with 20G left has any share free (w3 has 1 device with 0.5 gpu and 4G free)")


def test_a_share_on_workers_whose_devices_are_all_taken_says_none_is_free():
    reason = place([one(1, share(0.5))], [room("w1", (0, 0), shared={0: 100}, busy=(1,))]).waiting[(1, 100)]
    assert reason.sentence() == "needs 0.5 gpu (a share of one device) on one worker; no device has any share free"


def test_whole_devices_that_wait_say_how_many_devices_shares_keep_from_them():
    rooms = [room("w1", (0, 0), shared={0: 25}), room("w2", (0, 0), shared={0: 50, 1: 10})]
    reason = place([one(1, Request(1, 0, 2))], rooms).waiting[(1, 100)]
    assert reason.sentence() == ("needs 2 gpu on one worker; most free on one worker: 1 gpu (w1); "
                                 "3 gpu hold shares (a shared device is not handed out whole)")
    verdicts = {v.name: v.why for v in judge_workers(JobPlacement(), Request(1, 0, 2), rooms)}
    assert verdicts["w2"] == "busy: 0 gpu free of 2 gpu (2 holding shares), a task needs 2 gpu"


def test_a_share_reserving_more_memory_than_any_device_has_is_too_large():
    reason = place([one(1, share(0.5, 100 * GB))], [room("w1", (24 * GB, 80 * GB))]).waiting[(1, 100)]
    assert isinstance(reason, TooLarge)
    assert reason.sentence() == (
        "needs 0.5 gpu (a share of one device, reserving 100G of its memory) per task; no worker has a device "
        "that could hold it (largest: w1 has 1 gpu of 24G, 1 gpu of 80G); waiting for one to join")


def test_the_analysis_judges_a_share_by_the_room_each_device_has():
    rooms = [room("none", ()), room("full", shared={0: 80}), room("half", (0, 0), shared={0: 50}, busy=(1,)),
             room("small", (24 * GB,))]
    verdicts = {v.name: v.why for v in judge_workers(JobPlacement(), share(0.5), rooms)}
    assert verdicts == {
        "none": "too small: has 0 gpu, a task needs 0.5 gpu (a share of one device)",
        "full": "busy: 1 device with 0.2 gpu free, a task needs 0.5 gpu (a share of one device)",
        "half": "fits now",  # no device is unused, and half of one is enough
        "small": "fits now",
    }
    with_memory = {v.name: v.why for v in judge_workers(JobPlacement(), share(0.5, 30 * GB), rooms[2:])}
    assert with_memory["small"] == ("too small: has 1 gpu of 24G, a task needs 0.5 gpu "
                                    "(a share of one device, reserving 30G of its memory)")


# --- quotas, fair share, pool maximum -------------------------------------------------------------


def test_a_quota_counts_a_share_as_its_share():
    policy = Policy(quotas={"p": {"gpu": 1}})
    held = [running(1, "w1", share(0.5), 0, project="p"), running(2, "w1", share(0.25), 0, project="p")]
    rooms = [room("w1", (0, 0), shared={0: 75})]
    units = [one(3, share(0.25), project="p"), one(4, share(0.25), project="p")]
    result = place(units, rooms, policy=policy, running=held)
    assert (3, 300) in result.assignments  # 0.75 + 0.25: at the limit
    assert result.waiting[(4, 400)] == OverQuota("p", "gpu", 1.0, 1, 0.25)
    assert result.waiting[(4, 400)].sentence() == (
        "over project quota: gpu 1/1 (project p asks 0.25 gpu (a share of one device) more)")


def test_fair_share_counts_a_running_share_as_its_share():
    """Project a holds a quarter of one of two devices (1/8 of the pool's GPUs); b holds 2 of 8 cores (1/4):
    a is further below its share, so its task goes first to the one core left."""
    w1 = room("w1", (0, 0), shared={0: 25}, cpu=8)
    w1.free_cpu = 1  # room for one of the two
    held = [running(1, "w1", share(0.25), 0, project="a"),
            RunningTask(2, 2, "w1", Request(2, 0, 0), (), 0, project="b")]
    policy = Policy(pools={"default": PoolPolicy(sequencer=Sequencer.FAIR_SHARE)})
    units = [one(3, Request(1, 0, 0), project="b"), one(4, Request(1, 0, 0), project="a")]
    result = place(units, [w1], policy=policy, running=held)
    assert list(result.assignments) == [(4, 400)]


def test_a_pools_maximum_per_job_sums_shares():
    policy = PoolPolicy(max_per_job={"gpu": 1})
    assert over_pool_maximum(policy, job_total(JobSpec(command=["x"], resources={"gpu": 0.25}, replicas=4))) is None
    assert over_pool_maximum(policy, job_total(JobSpec(command=["x"], resources={"gpu": 0.25}, replicas=5))) == (
        "asks 1.25 gpu in total; the pool allows at most 1 per job")


# --- priority preemption -----------------------------------------------------------------------------


def test_every_share_on_a_device_is_evicted_for_a_whole_device():
    held = [running(1, "w1", share(0.5), 0, since=1), running(2, "w1", share(0.25), 0, since=2),
            running(3, "w1", share(0.5), 1, since=3)]
    rooms = [room("w1", (0, 0), shared={0: 75, 1: 50})]
    plan = choose_victims(Request(1, 0, 1), 1, 10, rooms, held)
    assert plan is not None and sorted(t.task_id for t in plan.victims) == [3]  # one task frees device 1
    plan = choose_victims(Request(1, 0, 2), 1, 10, rooms, held)
    assert plan is not None and sorted(t.task_id for t in plan.victims) == [1, 2, 3]


def test_one_of_two_shares_is_evicted_for_a_share():
    held = [running(1, "w1", share(0.5), 0, since=1), running(2, "w1", share(0.5), 0, since=2)]
    plan = choose_victims(share(0.5), 1, 10, [room("w1", shared={0: 100})], held)
    assert plan is not None and [t.task_id for t in plan.victims] == [2]  # the younger: less work lost


def test_many_shares_are_evicted_from_one_device_only_for_a_whole_device():
    held = [running(d * 10 + k, "w1", share(0.25), d, since=float(k)) for d in range(2) for k in range(4)]
    plan = choose_victims(Request(1, 0, 1), 1, 10, [room("w1", (0, 0), shared={0: 100, 1: 100})], held)
    assert plan is not None and len(plan.victims) == 4 and len({t.gpu_ids for t in plan.victims}) == 1


def test_the_pass_preempts_shares_for_a_higher_priority_whole_device():
    held = [running(1, "w1", share(0.5), 0), running(2, "w1", share(0.5), 0)]
    result = place([one(5, Request(1, 0, 1), priority=100)], [room("w1", shared={0: 100})], running=held)
    assert result.waiting[(5, 500)] == Preempting(2, (1, 2))


def fragmented() -> tuple[list[WorkerRoom], list[RunningTask]]:
    """Two 2-device workers with a quarter share on one device each, and a third with one device unused."""
    held = [running(1, "w1", share(0.25), 0, since=1), running(2, "w2", share(0.25), 0, since=2)]
    rooms = [room("w1", (0, 0), shared={0: 25}), room("w2", (0, 0), shared={0: 25}), room("w3", (0,))]
    return rooms, held


def test_a_gang_only_fragmentation_blocks_moves_small_tasks_that_fit_elsewhere():
    rooms, held = fragmented()
    gang = Unit((9, None), (90, 91), Request(1, 0, 2), priority=100)
    result = place([gang], rooms, running=held)
    assert result.waiting[(9, None)] == Moving(2, (1, 2))
    assert result.waiting[(9, None)].sentence() == (
        "moving 2 lower-priority tasks (jobs 1, 2) elsewhere: the free room would hold it, but is cut into pieces")
    assert sorted(t.task_id for t in result.victims[(9, None)]) == [1, 2]


def test_without_room_elsewhere_for_the_moved_tasks_it_is_plain_preemption():
    rooms, held = fragmented()
    rooms[2] = room("w3", (0, 0, 0), shared={0: 80, 1: 80, 2: 80})  # 4.1 free in all; no room for a quarter
    gang = Unit((9, None), (90, 91), Request(1, 0, 2), priority=100)
    assert place([gang], rooms, running=held).waiting[(9, None)] == Preempting(2, (1, 2))
    single = one(8, Request(1, 0, 2), priority=100)  # not a gang: preempted, never moved
    assert place([single], fragmented()[0], running=held).waiting[(8, 800)] == Preempting(1, (2,))  # the younger


def test_a_plan_that_moves_tasks_books_every_one_of_them_again():
    rooms, held = fragmented()
    rooms[2] = room("w3", (0,), shared={0: 80})  # room for one quarter only
    assert choose_victims(Request(1, 0, 2), 2, 10, rooms[:2], held, move_to=rooms[2:]) is None
    assert choose_victims(Request(1, 0, 2), 2, 10, rooms[:2], held) is not None


@st.composite
def shared_clusters(draw):
    """One worker of 3 devices filled by lower and higher priority tasks (shares and whole devices), and a
    pending request of either kind."""
    w = room("w1", (0, 0, 0))
    held = []
    sizes = st.one_of(st.integers(1, 99).map(lambda h: share(h / SHARES)), st.just(Request(1, 0, 1)))
    for task_id, (request, priority) in enumerate(draw(st.lists(st.tuples(sizes, st.integers(0, 20)),
                                                                max_size=12))):
        if w.fits(request):
            device, = w.take(request)
            held.append(running(task_id, "w1", request, device, priority, since=float(task_id)))
    pending = draw(st.one_of(st.integers(1, 99).map(lambda h: share(h / SHARES)), st.integers(1, 2).map(
        lambda n: Request(1, 0, n))))
    return w, held, pending, draw(st.integers(1, 3))


def _use(tasks: list[tuple[Request, tuple[int, ...]]]) -> dict[int, int]:
    used: dict[int, int] = {}
    for request, devices in tasks:
        for d in devices:
            used[d] = used.get(d, 0) + (request.share or SHARES)
    return used


@settings(max_examples=300, deadline=None)
@given(shared_clusters(), st.booleans())
def test_a_preemption_plan_with_shares_never_overfills_a_device(cluster, move):
    w, held, pending, tasks = cluster
    plan = choose_victims(pending, tasks, 10, [w], held, move_to=[] if move else None)
    if plan is None:
        return
    assert all(t.priority < 10 for t in plan.victims)
    after = w.copy()
    for victim in plan.victims:
        after.give(victim.request, victim.gpu_ids)
    kept = [(t.request, t.gpu_ids) for t in held if t not in plan.victims]
    for _ in plan.placements:
        assert after.fits(pending)  # the plan freed enough for every task it counts
        kept.append((pending, tuple(after.take(pending))))
    used = _use(kept)
    assert all(hundredths <= SHARES for hundredths in used.values())
    assert after.gpu_shared == _use([(r, devices) for r, devices in kept if r.share])
    assert sorted(after.free_gpu_ids) == [d for d in range(3) if d not in used]
    if move:  # a move: every victim fits again in what is left
        for victim in sorted(plan.victims, key=lambda t: -t.request.gpu):
            assert after.fits(victim.request)
            after.take(victim.request)


# --- reservations ------------------------------------------------------------------------------------


def test_room_held_for_a_share_keeps_other_shares_off_it_and_backfills_elsewhere():
    rooms = [room("w1", shared={0: 75}), room("w2", shared={0: 60})]
    policy = Policy(pools={"default": PoolPolicy(reservation_time=60)})
    units = [one(1, share(0.5), since=0), one(2, share(0.4), since=50), one(3, share(0.25), since=50)]
    result = place(units, rooms, policy=policy, now=61)
    reserved = result.waiting[(1, 100)]
    assert isinstance(reserved, Reserved) and reserved.workers == ("w2",)  # the most of one device free
    assert reserved.sentence() == ("needs 0.5 gpu (a share of one device) on one worker; the most any device has "
                                   "free is 0.4, on w2; room held for it on w2")
    assert result.waiting[(2, 200)] == BehindReservation(1)
    assert [a.worker_id for a in result.assignments[(3, 300)]] == ["w1"]


def test_a_gang_of_shares_holds_as_many_workers_as_their_devices_hold_shares():
    """Two shares that reserve 40G each fit one 80G device, though the hundredths alone would fit four."""
    rooms = [room(f"w{i}", (80 * GB,), busy=(0,)) for i in range(1, 4)]
    policy = Policy(pools={"default": PoolPolicy(reservation_time=60)})
    gang = Unit((1, None), (10, 11, 12, 13), share(0.25, 40 * GB))
    reserved = place([gang], rooms, policy=policy, now=61).waiting[(1, None)]
    assert isinstance(reserved, Reserved) and reserved.workers == ("w1", "w2")


# --- serving -----------------------------------------------------------------------------------------


def replica_request(resources: dict) -> Request:
    spec = DeploymentSpec(name="llm", command=["serve"], resources=resources)
    return request_of(DeploymentFacts(1, "llm", spec, DeploymentState.READY, 0.0, 1))


def test_two_replicas_of_half_a_device_share_it_and_a_third_opens_the_next():
    half, whole = replica_request({"gpu": 0.5}), replica_request({"gpu": 1})
    assert (half.gpu, half.share) == (0.5, 50)
    pool = Pool([room("w1", (0, 0))])
    assert pool.fits(whole, 1, reserved={"chat": (half, 2)})  # both halves on device 0: device 1 stays whole
    assert not pool.fits(whole, 1, reserved={"chat": (half, 3)})  # the third half opens device 1
    assert pool.fits(half, 4) and not pool.fits(half, 5)


def test_the_pool_counts_placed_shares_and_keeps_them_through_json():
    half = replica_request({"gpu": 0.5, "gpu_memory": "30G"})
    w = room("w1", (80 * GB, 80 * GB))
    held = [Holding("w1", half, tuple(w.take(half))) for _ in range(2)]
    assert w.gpu_shared == {0: 100} and w.gpu_memory_shared == {0: 60 * GB}
    pool = Pool([w], {"chat": held})
    again = Pool.from_json(**json.loads(json.dumps(pool.to_json())))
    assert again.rooms == pool.rooms
    for view in (pool, again):
        assert view.fits(half, 1) and not view.fits(half, 3)  # device 1 holds two more, device 0 none
        assert not view.fits(Request(1, 0, 2), 1)
        assert view.fits(Request(1, 0, 2), 1, freed=["chat"])


def test_the_router_fits_a_whole_device_beside_two_half_replicas_and_evicts_for_a_third():
    router = Router(backend=None, policy=FitPolicy())
    specs = {"half": {"gpu": 0.5}, "whole": {"gpu": 1}}
    facts = {name: DeploymentFacts(i, name, DeploymentSpec(name=name, command=["serve"], min_replicas=0,
                                                           resources=specs[name]), DeploymentState.READY, 0.0, n)
             for i, (name, n) in enumerate((("half", 2), ("whole", 0)), start=1)}
    router.publish(Catalog(facts, {"half": (Endpoint(1, "127.0.0.1:1"),)}))
    w = room("w1", (0, 0))
    half = request_of(facts["half"])
    router.pool_view = Pool([w], {"half": [Holding("w1", half, tuple(w.take(half))) for _ in range(2)]})
    assert w.gpu_shared == {0: 100} and router.fits("whole", frozenset(), frozenset())
    facts["half"] = DeploymentFacts(1, "half", facts["half"].spec, DeploymentState.READY, 0.0, 3)
    router.publish(Catalog(facts, {"half": (Endpoint(1, "127.0.0.1:1"),)}))  # a third half is wanted
    assert not router.fits("whole", frozenset(), frozenset())
    assert router.fits("whole", frozenset({"half"}), frozenset())
