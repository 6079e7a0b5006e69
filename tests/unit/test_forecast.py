"""Start estimates over hand-built snapshots: the scheduler run ahead (corral.scheduling.forecast)."""

from __future__ import annotations

import gc
from dataclasses import astuple, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core.config import PoolPolicy, Sequencer
from corral.scheduling import forecast as forecasting
from corral.scheduling.forecast import MIN_STEP, RESOLUTION, Ending, Waiting, forecast
from corral.scheduling.placement import Assignment, Request, Unit, WorkerRoom
from corral.scheduling.policy import Policy
from corral.scheduling.preemption import RunningTask
from corral.scheduling.reasons import NoRoom, TooLarge
from corral.scheduling.snapshot import JobEnd, JobPlacement

NOW = 1_000.0


def worker(id_: str, gpus: int = 1, free: list[int] | None = None, cpu: float = 8) -> WorkerRoom:
    return WorkerRoom(id_, id_, cpu, 2**35, gpus, cpu, 2**35, list(range(gpus)) if free is None else free)


def busy(job: int, task: int, worker_id: str, ends_in: float, gpu: int = 0, priority: int = 0) -> Ending:
    return Ending(RunningTask(task, job, worker_id, Request(1, 0, 1), (gpu,), priority, since=NOW - 10), NOW + ends_in)


def waiting(job: int, runs_for: float = 300, gpus: int = 1, priority: int = 0, job_facts: JobPlacement | None = None,
            tasks: int = 1) -> Waiting:
    key = (job, None) if tasks > 1 else (job, job * 100)
    unit = Unit(key, tuple(job * 100 + i for i in range(tasks)), Request(1, 0, gpus), priority=priority)
    return Waiting(unit, runs_for, job_facts or JobPlacement())


def within(value: float | None, expected: float) -> bool:
    """A step lands on an event, or up to a tenth of the time ahead past it."""
    return value is not None and expected <= value <= expected + max(MIN_STEP, (expected - NOW) * RESOLUTION) + 1e-6


def test_a_job_that_fits_now_starts_now():
    estimates = forecast([waiting(1)], [worker("w1")], [], now=NOW)
    assert estimates[1].start_at == NOW


def test_a_job_starts_when_the_job_holding_its_room_ends_and_names_it():
    estimates = forecast([waiting(2)], [worker("w1", free=[])], [busy(41, 9, "w1", 600)], now=NOW)
    assert estimates[2].start_at == NOW + 600 and estimates[2].after_job == 41


def test_the_queue_runs_one_after_another_on_one_gpu():
    estimates = forecast([waiting(2, runs_for=300), waiting(3, runs_for=300)], [worker("w1", free=[])],
                         [busy(41, 9, "w1", 100)], now=NOW)
    assert estimates[2].start_at == NOW + 100
    assert within(estimates[3].start_at, NOW + 400) and estimates[3].after_job == 2


def test_a_higher_priority_job_goes_first():
    estimates = forecast([waiting(2, runs_for=300), waiting(3, runs_for=300, priority=5)],
                         [worker("w1", free=[])], [busy(41, 9, "w1", 100, priority=9)], now=NOW)
    assert estimates[3].start_at == NOW + 100
    assert within(estimates[2].start_at, NOW + 400)


def test_fifo_keeps_the_order_of_submission():
    policy = Policy(pools={"default": PoolPolicy(sequencer=Sequencer.FIFO)})
    estimates = forecast([waiting(2, runs_for=300), waiting(3, runs_for=300, priority=5)],
                         [worker("w1", free=[])], [busy(41, 9, "w1", 100)], now=NOW, policy=policy)
    assert estimates[2].start_at == NOW + 100 and within(estimates[3].start_at, NOW + 400)


def test_a_job_too_large_for_any_worker_never_starts():
    estimates = forecast([waiting(2, gpus=4)], [worker("w1", gpus=2)], [], now=NOW)
    assert estimates[2].start_at is None and estimates[2].never and isinstance(estimates[2].reason, TooLarge)


def test_a_job_waiting_for_another_starts_after_it_ends():
    first, second = waiting(2, runs_for=500), waiting(3, job_facts=JobPlacement(after=(2,)))
    estimates = forecast([first, second], [worker("w1"), worker("w2")], [], now=NOW,
                         dependencies={2: JobEnd("PENDING")})
    assert estimates[2].start_at == NOW
    assert within(estimates[3].start_at, NOW + 500) and estimates[3].after_job == 2


def test_a_job_after_one_that_failed_never_starts():
    estimates = forecast([waiting(3, job_facts=JobPlacement(after=(2,)))], [worker("w1")], [], now=NOW,
                         dependencies={2: JobEnd("FAILED", NOW - 5)})
    assert estimates[3].start_at is None and estimates[3].never


def test_a_begin_time_is_kept():
    estimates = forecast([waiting(2, job_facts=JobPlacement(begin=NOW + 3600))], [worker("w1")], [], now=NOW)
    assert estimates[2].start_at == NOW + 3600


def test_a_higher_priority_job_preempts_at_once_where_the_pool_preempts():
    estimates = forecast([waiting(2, priority=10)], [worker("w1", free=[])], [busy(41, 9, "w1", 9_000)], now=NOW)
    assert within(estimates[2].start_at, NOW)  # once its victim has stopped


def test_without_preemption_it_waits_for_the_end():
    policy = Policy(pools={"default": PoolPolicy(preemption=False)})
    estimates = forecast([waiting(2, priority=10)], [worker("w1", free=[])], [busy(41, 9, "w1", 9_000)], now=NOW,
                         policy=policy)
    assert estimates[2].start_at == NOW + 9_000


def test_a_gang_waits_until_all_its_room_is_free():
    rooms = [worker("w1", free=[]), worker("w2", free=[])]
    ending = [busy(41, 9, "w1", 100), busy(42, 10, "w2", 700)]
    estimates = forecast([waiting(2, tasks=2)], rooms, ending, now=NOW)
    assert estimates[2].start_at == NOW + 700 and estimates[2].after_job == 42


def test_past_the_horizon_the_start_is_unknown_but_not_never():
    estimates = forecast([waiting(2)], [worker("w1", free=[])], [busy(41, 9, "w1", 90_000)], now=NOW,
                         horizon=3_600)
    assert estimates[2].start_at is None and not estimates[2].never


def test_an_array_says_when_its_last_task_starts():
    items = [Waiting(Unit((2, 200 + i), (200 + i,), Request(1, 0, 1)), 300) for i in range(3)]
    estimates = forecast(items, [worker("w1")], [], now=NOW)
    assert estimates[2].start_at == NOW and within(estimates[2].all_started_at, NOW + 600)


def test_a_job_placed_over_several_steps_starts_at_its_first_placement_and_names_the_job_ending_there():
    """Its tasks start as the running ones end, one step after another: its start is the first, after the job whose
    end freed that room, and its last start is the latest."""
    items = [Waiting(Unit((2, 200 + i), (200 + i,), Request(1, 0, 1)), 5_000) for i in range(3)]
    ending = [busy(41, 9, "w1", 300), busy(42, 10, "w1", 900, gpu=1), busy(43, 11, "w1", 2_000, gpu=2)]
    estimates = forecast(items, [worker("w1", gpus=3, free=[])], ending, now=NOW)
    assert estimates[2].start_at == NOW + 300 and estimates[2].after_job == 41
    assert within(estimates[2].all_started_at, NOW + 2_000)


def test_a_job_waited_on_ends_with_its_last_task_running_or_queued():
    """The tasks left of a job others wait on count those running and those queued: its waiter starts once the last
    of them ends, not when the running ones do."""
    items = [waiting(2, runs_for=500), waiting(3, job_facts=JobPlacement(after=(2,)))]
    estimates = forecast(items, [worker("w1"), worker("w2", free=[])], [busy(2, 9, "w2", 100)], now=NOW)
    assert estimates[2].start_at == NOW
    assert within(estimates[3].start_at, NOW + 500) and estimates[3].after_job == 2


@settings(max_examples=60, deadline=None)
@given(ends=st.lists(st.floats(min_value=1, max_value=50_000), min_size=1, max_size=6),
       runs=st.lists(st.floats(min_value=1, max_value=50_000), min_size=1, max_size=8))
def test_on_one_queue_estimates_follow_the_queue_and_never_precede_now(ends, runs):
    rooms = [worker(f"w{i}", free=[]) for i in range(len(ends))]
    ending = [busy(1000 + i, 5000 + i, f"w{i}", end) for i, end in enumerate(ends)]
    policy = Policy(pools={"default": PoolPolicy(sequencer=Sequencer.FIFO)})
    items = [waiting(i + 1, runs_for=r) for i, r in enumerate(runs)]
    estimates = forecast(items, rooms, ending, now=NOW, policy=policy, horizon=10**7)
    starts = [estimates[i + 1].start_at for i in range(len(runs))]
    assert all(s is not None and s >= NOW for s in starts)
    assert starts == sorted(starts)  # one kind, first come first served: none overtakes another
    assert starts[0] == pytest.approx(min(ends) + NOW)


@settings(max_examples=60, deadline=None)
@given(ends=st.lists(st.floats(min_value=1, max_value=50_000), min_size=1, max_size=6),
       jobs=st.lists(st.tuples(st.floats(min_value=1, max_value=50_000), st.integers(1, 2), st.integers(0, 2),
                               st.integers(1, 3)), min_size=1, max_size=8))
def test_equal_requests_forecast_as_one_shared_request(ends, jobs):
    """Each waiting task reads its own request: the simulation answers as when alike ones share one object."""
    rooms = [worker(f"w{i}", gpus=2, free=[1]) for i in range(len(ends))]
    ending = [busy(1000 + i, 5000 + i, f"w{i}", end) for i, end in enumerate(ends)]
    items = [waiting(i + 1, runs_for=r, gpus=gpus, priority=priority, tasks=tasks)
             for i, (r, gpus, priority, tasks) in enumerate(jobs)]
    one = {}
    shared = [Waiting(replace(item.unit, request=one.setdefault(item.unit.request, item.unit.request)),
                      item.runs_for, item.job) for item in items]
    assert forecast(items, rooms, ending, now=NOW) == forecast(shared, rooms, ending, now=NOW)


def passes_offered(monkeypatch) -> list[int]:
    """How many units each pass of the simulation is offered."""
    offered, real = [], forecasting.place_over
    monkeypatch.setattr(forecasting, "place_over", lambda units, *a, **kw: offered.append(len(units)) or real(units, *a,
                                                                                                             **kw))
    return offered


def array(job: int, tasks: int, priority: int = 0, runs_for: float = 300) -> list[Waiting]:
    return [Waiting(Unit((job, job * 100 + i), (job * 100 + i,), Request(1, 0, 1), priority=priority), runs_for)
            for i in range(tasks)]


def test_of_one_request_one_unit_more_than_the_room_holds_is_offered_and_the_rest_wait_for_its_reason(monkeypatch):
    offered = passes_offered(monkeypatch)
    items = array(2, 3, priority=9) + array(3, 3, priority=5) + array(4, 3)
    estimates = forecast(items, [worker("w1", gpus=2)], [], now=NOW, horizon=100)
    assert offered[0] == 3  # each of the three kinds alone would be offered 2 (the room for 2)
    assert estimates[2].start_at == NOW and estimates[2].all_started_at is None
    assert estimates[3].reason == estimates[4].reason and isinstance(estimates[4].reason, NoRoom)


def test_where_rounding_lets_more_fit_than_the_free_room_sums_to_the_pass_runs_again_with_all(monkeypatch):
    offered = passes_offered(monkeypatch)
    rooms = [worker(f"w{i}", gpus=1, cpu=1 - 1e-10) for i in range(20)]  # each holds a 1-core task, within rounding
    estimates = forecast(array(2, 15, priority=9) + array(3, 15), rooms, [], now=NOW, horizon=100)
    assert offered[:2] == [20, 30]  # room for 19 in all, one more offered: all 20 placed, none waited
    assert estimates[2].all_started_at == NOW and estimates[3].start_at == NOW
    assert estimates[3].all_started_at is None  # 5 of its 15 placed


def test_watching_one_job_stops_once_it_is_placed():
    items = [waiting(2, runs_for=300), waiting(3, runs_for=300)]
    estimates = forecast(items, [worker("w1", free=[])], [busy(41, 9, "w1", 100)], now=NOW, watch=2)
    assert estimates[2].start_at == NOW + 100 and estimates[3].start_at is None


@pytest.mark.parametrize("collecting", [True, False])
def test_the_garbage_collector_is_left_as_it_was(collecting):
    """The simulation runs with the collector off, and turns it back on only if it was on."""
    was = gc.isenabled()
    try:
        gc.enable() if collecting else gc.disable()
        forecast([waiting(2)], [worker("w1", free=[])], [busy(41, 9, "w1", 600)], now=NOW)
        assert gc.isenabled() is collecting
    finally:
        gc.enable() if was else gc.disable()


def test_a_task_read_both_waiting_and_holding_room_waits_for_reads_that_agree():
    """Reads a moment apart (the pending rows, then the kept index, with a placement committed between them) can
    show a task pending while it holds room: placed again, it would hold its room twice and end twice, which stopped
    every estimate with a KeyError. It holds its room; its unit is left out of this simulation, the others not."""
    overlapping = waiting(2, runs_for=300)  # its task, 200, still holds w1's first GPU
    queue = [overlapping, waiting(3, runs_for=50), waiting(4, runs_for=50), waiting(5, runs_for=50)]
    estimates = forecast(queue, [worker("w1", gpus=2, free=[1])], [busy(2, 200, "w1", 600)], now=NOW)
    assert 2 not in estimates and estimates[3].start_at == NOW
    assert within(estimates[4].start_at, NOW + 50) and within(estimates[5].start_at, NOW + 100)


def test_units_evicted_wait_again_each_in_a_place_of_its_own():
    """An evicted unit queues after every other. Its place was the size of the order, which does not grow for a unit
    placed in the simulation and then evicted (its key is already there): two such units shared one place, and were
    then taken by key rather than in the order they were evicted."""
    low = [waiting(2, runs_for=10_000), waiting(3, runs_for=10_000)]  # placed at once, both on w1
    high = waiting(4, gpus=2, priority=10, job_facts=JobPlacement(begin=NOW + 100))  # evicts both at its begin
    simulation = forecasting._Simulation([*low, high], [worker("w1", gpus=2)], [], NOW, Policy(), {},
                                         forecasting.HORIZON)
    estimates = simulation.run(None)
    assert estimates[2].start_at == estimates[3].start_at == NOW and within(estimates[4].start_at, NOW + 100)
    assert len(set(simulation.order.values())) == len(simulation.order)


def test_alike_units_in_a_row_take_their_kind_from_the_one_before_without_hashing_their_requests(monkeypatch):
    """A job's units, each reading its own equal request, are numbered as `_kind` numbers each unit, the irregular
    kinds (a cap, workers to avoid) found as before; and the set-up (the kinds, the request mixes) hashes a request
    per run of alike units, not per unit."""
    def unit(job: int, task: int, gpus: int = 1, priority: int = 0, **facts) -> Waiting:
        return Waiting(Unit((job, task), (task,), Request(1, 0, gpus), priority=priority, **facts), 300)

    queue = [*(unit(2, 200 + n) for n in range(20)), *(unit(3, 300 + n, gpus=2) for n in range(20)),
             unit(4, 400, priority=5), unit(4, 401, priority=5, max_running=1), unit(5, 500, avoid=frozenset({"w1"})),
             *(unit(6, 600 + n) for n in range(20))]
    hashed = []
    monkeypatch.setattr(Request, "__hash__", lambda self: hashed.append(self) or self._hash)
    simulation = forecasting._Simulation(queue, [worker("w1", gpus=2)], [], NOW, Policy(), {}, forecasting.HORIZON)
    assert len(hashed) <= 40  # some eight per run of alike units (its kind, its mix); two per unit before
    monkeypatch.undo()
    numbered = forecasting._Simulation([], [worker("w1", gpus=2)], [], NOW, Policy(), {}, forecasting.HORIZON)
    ordered = sorted(queue, key=lambda item: -item.unit.priority)
    assert simulation.kind_of == {item.unit.key: numbered._kind(item.unit) for item in ordered}
    assert simulation.kind_facts == numbered.kind_facts and simulation.irregular == numbered.irregular != set()


def test_the_request_mixes_are_counted_by_runs_of_alike_tasks_and_units_as_task_by_task(monkeypatch):
    """The set-up hands each pool's mix its running tasks and pending units as runs of alike ones in a row (a job's,
    read together; a pool or a request between breaks a run), and the mix counts them as it counts them one by one."""
    from corral.scheduling.fragmentation import RequestMix

    rooms = [worker("w1", gpus=8, free=[]), replace(worker("w2", gpus=8, free=[]), pool="p")]
    ending = [*(busy(41, 10 + n, "w1", 100 + n, gpu=n) for n in range(4)), busy(42, 20, "w2", 50),
              busy(41, 14, "w1", 104, gpu=4), *(busy(43, 30 + n, "w1", 60, gpu=5 + n) for n in range(3))]
    ending[-1] = Ending(replace(ending[-1].task, request=Request(1, 0, 2)), ending[-1].ends_at)
    queue = [*array(2, 5), waiting(3, gpus=2), *array(4, 3), waiting(5, tasks=2)]
    handed: list[list[tuple]] = []
    add_all = RequestMix.add_all
    monkeypatch.setattr(RequestMix, "add_all", lambda mix, runs: handed.append(list(runs)) or add_all(mix, runs))
    simulation = forecasting._Simulation(queue, rooms, ending, NOW, Policy(), {}, forecasting.HORIZON)
    assert sorted([len(runs), [repeats for *_, repeats in runs]] for runs in handed) == [
        [1, [1]], [7, [4, 3, 1, 5, 1, 3, 1]]]
    by_task = RequestMix()
    for e in ending:
        if e.task.worker_id == "w1":
            by_task.add(e.task.request)
    for item in queue:
        by_task.add(item.unit.request, item.unit.constraints, len(item.unit.task_ids))
    mix = simulation.mixes["default"]
    assert list(mix.counts.items()) == list(by_task.counts.items()) and mix.scale == by_task.scale


def test_the_tasks_a_forecast_places_are_those_the_constructors_make(monkeypatch):
    """The simulation makes its placed tasks, and the pass its assignments, without their constructors: the same
    values, of the same classes, with the same fields."""
    simulation = forecasting._Simulation([waiting(2, tasks=2), waiting(3), waiting(4)], [worker("w1", gpus=4)], [],
                                         NOW, Policy(), {}, forecasting.HORIZON)
    placements = []
    place_over = forecasting.place_over

    def recorded(*args, **kwargs):
        placements.append(place_over(*args, **kwargs))
        return placements[-1]

    monkeypatch.setattr(forecasting, "place_over", recorded)
    simulation.run(None)
    tasks = list(simulation.index.running.values())
    assert len(tasks) == 4 and all(type(task) is RunningTask for task in tasks)
    assert all(task == RunningTask(**vars(task)) and vars(task) == vars(RunningTask(**vars(task))) for task in tasks)
    assignments = [a for placement in placements for placed in placement.assignments.values() for a in placed]
    assert len(assignments) == 4
    assert all(astuple(a) == astuple(Assignment(a.task_id, a.worker_id, a.gpu_ids)) for a in assignments)


def test_ends_added_in_batches_come_out_in_order_once_due_and_only_once():
    ends = forecasting._Ends()
    ends.add([(30.0, 3), (10.0, 9), (20.0, 1)])
    ends.add([(15.0, 4), (10.0, 2), (40.0, 5)])
    ends.add([])
    assert ends.first() == 10.0
    assert ends.due(9.0) == []
    assert ends.due(20.0) == [(10.0, 2), (10.0, 9), (15.0, 4), (20.0, 1)]
    assert ends.first() == 30.0
    ends.add([(25.0, 7)])
    assert ends.due(35.0) == [(25.0, 7), (30.0, 3)]
    assert ends.due(100.0) == [(40.0, 5)]
    assert ends.first() is None and ends.due(1e9) == []


@pytest.fixture
def asked_of_gate(monkeypatch) -> list[JobPlacement]:
    """The jobs the simulation asks `gate` about, in order."""
    asked = []
    gate = forecasting.gate

    def counted(job, dependencies, now):
        asked.append(job)
        return gate(job, dependencies, now)

    monkeypatch.setattr(forecasting, "gate", counted)
    return asked


def test_only_units_with_dependencies_or_a_begin_time_are_asked_of_gate(asked_of_gate):
    later = JobPlacement(begin=NOW + 600)
    estimates = forecast([waiting(1), waiting(2), waiting(3, job_facts=later)], [worker("w1", gpus=4)], [], now=NOW)
    assert asked_of_gate and all(job is later for job in asked_of_gate)
    assert estimates[1].start_at == estimates[2].start_at == NOW and within(estimates[3].start_at, NOW + 600)


def test_which_units_are_asked_of_gate_is_gates_own_predicate(asked_of_gate):
    """A reason `gate` gains to hold a job is one its `gated` gains: the simulation asks the same predicate."""
    held = JobPlacement()
    object.__setattr__(held, "gated", True)  # as a job held for a reason gate learns later
    forecast([waiting(1), waiting(2, job_facts=held)], [worker("w1", gpus=4)], [], now=NOW)
    assert asked_of_gate == [held]
