"""GPU memory in placement (DESIGN.md, Scheduling): each GPU a task gets has at least the memory it asks for."""

from __future__ import annotations

import pytest

from corral.core.config import PoolPolicy, Strategy
from corral.core.deployment_spec import DeploymentSpec
from corral.core.serving import DeploymentFacts, DeploymentState
from corral.scheduling.analysis import judge_workers
from corral.scheduling.placement import Request, Unit, WorkerRoom, place
from corral.scheduling.policy import Policy
from corral.scheduling.preemption import RunningTask, choose_victims
from corral.scheduling.reasons import NoRoom, TooLarge
from corral.scheduling.snapshot import JobPlacement
from corral.serving.pool import Holding, Pool
from corral.serving.router import request_of

GB = 10**9  # as `--gpu-memory 40G` reads it


def room(id_: str, memories: tuple[int, ...], free: list[int] | None = None, cpu: float = 16) -> WorkerRoom:
    """A worker whose GPU i has memories[i] bytes (0: unknown)."""
    gpus = len(memories)
    return WorkerRoom(id_, id_, cpu, 64 * GB, gpus, cpu, 64 * GB, list(range(gpus)) if free is None else free,
                      gpu_memory=memories if any(memories) else ())


def gpus(n: int, gpu_memory: int = 0) -> Request:
    return Request(1, 0, n, gpu_memory=gpu_memory)


def one(job: int, request: Request) -> Unit:
    return Unit((job, job * 100), (job * 100,), request)


# --- WorkerRoom --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("request_", "fits"), [
    (gpus(1, 40 * GB), True),
    (gpus(1, 80 * GB), True),
    (gpus(2, 40 * GB), False),  # one free device is big enough
    (gpus(1, 81 * GB), False),
    (gpus(2), True),  # no memory rule: any free device
])
def test_fits_counts_only_the_free_devices_with_enough_memory(request_, fits):
    assert room("w", (24 * GB, 80 * GB, 80 * GB), free=[0, 1]).fits(request_) is fits


def test_a_device_of_unknown_memory_serves_only_requests_without_a_memory_rule():
    virtual = room("w", (0, 0))
    assert virtual.fits(gpus(2)) and virtual.could_ever_fit(gpus(2))
    assert not virtual.fits(gpus(1, GB)) and not virtual.could_ever_fit(gpus(1, GB))
    mixed = room("w", (0, 24 * GB))
    assert mixed.take(gpus(1, GB)) == [1]


def test_could_ever_fit_judges_every_device_busy_or_not():
    busy = room("w", (24 * GB, 80 * GB), free=[])
    assert busy.could_ever_fit(gpus(1, 80 * GB))
    assert not busy.could_ever_fit(gpus(2, 40 * GB))


def test_take_chooses_the_smallest_devices_that_suffice():
    r = room("w", (80 * GB, 24 * GB, 40 * GB, 24 * GB))
    assert r.free_gpu_ids == [1, 3, 2, 0]  # smallest first, then by index
    assert r.take(gpus(1, 32 * GB)) == [2]
    assert r.take(gpus(1)) == [1]  # no rule: the smallest, keeping the big ones
    assert r.take(gpus(1, 40 * GB)) == [0]
    assert r.free_gpu_ids == [3]


def test_give_undoes_take_in_the_same_order():
    r = room("w", (80 * GB, 24 * GB, 40 * GB, 24 * GB))
    before = r.copy()
    request = gpus(2, 30 * GB)
    taken = r.take(request)
    assert taken == [0, 2] and before.free_gpu_ids == [1, 3, 2, 0]  # the task sees them in index order
    r.give(request, taken)
    assert r == before


# --- place --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", list(Strategy))
def test_every_strategy_passes_over_workers_with_more_but_smaller_free_devices(strategy):
    rooms = [room("small", (24 * GB,) * 4), room("big", (80 * GB,))]
    policy = Policy(pools={"default": PoolPolicy(strategy=strategy)})
    result = place([one(1, gpus(1, 40 * GB))], rooms, policy=policy)
    assert [(a.worker_id, a.gpu_ids) for a in result.assignments[(1, 100)]] == [("big", (0,))]


def test_a_request_without_a_memory_rule_leaves_the_big_device_to_one_that_needs_it():
    rooms = [room("w", (80 * GB, 16 * GB))]
    result = place([one(1, gpus(1)), one(2, gpus(1, 40 * GB))], rooms)
    assert result.assignments[(1, 100)][0].gpu_ids == (1,)
    assert result.assignments[(2, 200)][0].gpu_ids == (0,)


def test_a_gang_that_needs_big_devices_goes_where_they_are():
    rooms = [room("w1", (24 * GB, 24 * GB)), room("w2", (24 * GB, 80 * GB)), room("w3", (80 * GB,))]
    unit = Unit((1, None), (10, 11), gpus(1, 80 * GB))
    placed = place([unit], rooms).assignments[(1, None)]
    assert sorted((a.worker_id, a.gpu_ids) for a in placed) == [("w2", (1,)), ("w3", (0,))]


def test_preemption_evicts_the_task_on_a_device_that_is_big_enough():
    r = room("w", (24 * GB, 80 * GB), free=[])
    small = RunningTask(1, 1, "w", gpus(1), (0,), priority=0, since=20.0)  # younger: cheaper, but no help
    big = RunningTask(2, 2, "w", gpus(1), (1,), priority=0, since=10.0)
    plan = choose_victims(gpus(1, 40 * GB), 1, 10, [r], [small, big])
    assert plan is not None and [t.task_id for t in plan.victims] == [2]


def test_the_routers_fit_check_follows_the_rule_for_a_deployment():
    spec = DeploymentSpec(name="llm", command=["serve"], resources={"gpu": 1, "gpu_memory": 40 * GB})
    assert spec.replica_job().resources.gpu_memory == 40 * GB  # its replicas are placed by the rule
    request = request_of(DeploymentFacts(1, "llm", spec, DeploymentState.READY, 0.0, 1))
    pool = Pool([room("w", (24 * GB, 80 * GB), free=[0])], {"chat": [Holding("w", gpus(1), (1,))]})
    assert pool.could_ever_fit(request) and not pool.fits(request, 1)
    assert pool.fits(request, 1, freed=["chat"])  # once chat gives back the big device


# --- why it waits ----------------------------------------------------------------------------------


def test_reason_when_no_worker_has_devices_that_large():
    reason = place([one(1, gpus(1, 40 * GB))], [room("w3", (24 * GB, 24 * GB))]).waiting[(1, 100)]
    assert isinstance(reason, TooLarge)
    assert reason.sentence() == ("needs 1 gpu with at least 40G memory per task; no worker has that much "
                                 "(largest: w3 has 2 gpu of 24G); waiting for one to join")


def test_reason_when_the_big_devices_are_busy():
    rooms = [room("w3", (80 * GB, 24 * GB, 24 * GB), free=[1, 2]), room("w4", (80 * GB,), free=[])]
    reason = place([one(1, gpus(1, 40 * GB))], rooms).waiting[(1, 100)]
    assert isinstance(reason, NoRoom)
    assert reason.sentence() == ("needs 1 gpu with at least 40G memory on one worker; "
                                 "most free on one worker: 0 (w3 has 2 gpu of 24G free)")


def test_the_analysis_explains_each_worker_by_its_devices():
    rooms = [room("virtual", (0, 0)), room("small", (24 * GB,)), room("busy", (80 * GB, 24 * GB), free=[1]),
             room("big", (80 * GB,))]
    verdicts = {v.name: v.why for v in judge_workers(JobPlacement(), gpus(1, 40 * GB), rooms)}
    assert verdicts == {
        "virtual": "too small: has 2 gpu of unknown memory, a task needs 1 gpu with at least 40G memory",
        "small": "too small: has 1 gpu of 24G, a task needs 1 gpu with at least 40G memory",
        "busy": "busy: 1 gpu of 24G free of 1 gpu of 24G, 1 gpu of 80G, a task needs 1 gpu with at least 40G memory",
        "big": "fits now",
    }


def test_a_copied_room_has_its_own_free_room_and_its_devices_in_order():
    room = WorkerRoom("w", "w", 8, GB, 3, 8, GB, [0, 1, 2], gpu_memory=(80 * GB, 24 * GB, 40 * GB),
                      gpu_shared={}, free_custom={"fpga": 1.0}, custom={"fpga": 1.0})
    room.free_gpu_ids = [0, 1, 2]  # set out of order after construction: a copy orders them smallest first
    copy = room.copy()
    assert copy.free_gpu_ids == [1, 2, 0]
    copy.take(Request(1, 0, 1, custom=(("fpga", 1.0),)))
    assert (room.free_gpu_ids, room.free_custom, room.free_cpu) == ([0, 1, 2], {"fpga": 1.0}, 8)
    plain = WorkerRoom("p", "p", 8, GB, 2, 8, GB, [1, 0])
    assert plain.copy().free_gpu_ids == [1, 0]  # without device memory, the order is kept as it is
