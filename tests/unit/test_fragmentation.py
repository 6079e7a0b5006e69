"""Fragmentation-aware placement (docs/scheduling.md): never over capacity, a share on one device, gangs whole or
not at all; and where fragmentation matters, it places more than concentrated does."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core.config import PoolPolicy, Sequencer, Strategy
from corral.engine.handlers import ScheduleJobs
from corral.scheduling.fragmentation import Fragmentation, RequestMix
from corral.scheduling.placement import Request, Unit, WorkerRoom, place
from corral.scheduling.policy import Policy
from corral.scheduling.rooms import SHARES, RoomBook

GB = 10**9
FIFO = dict(sequencer=Sequencer.FIFO)


def policy(strategy: Strategy) -> Policy:
    return Policy(pools={"default": PoolPolicy(strategy=strategy, **FIFO)})


def worker(name: str, gpus: int, cpu: float = 64, memories: tuple[int, ...] = ()) -> WorkerRoom:
    return WorkerRoom(name, name, cpu, 256 * GB, gpus, cpu, 256 * GB, list(range(gpus)), gpu_memory=memories)


def placed(units: list[Unit], rooms: list[WorkerRoom], strategy: Strategy) -> int:
    return sum(len(a) for a in place(units, rooms, policy=policy(strategy)).assignments.values())


# -- hand-built cases: where concentrated fragments and fragmentation-aware does not ----------------------------


def test_a_share_fills_the_device_it_fits_exactly_and_keeps_the_larger_hole_for_a_larger_share() -> None:
    a, b = worker("a", 1, cpu=16), worker("b", 1, cpu=8)  # concentrated takes b first: fewer free cores
    a.take(Request(1, 0, 0.7))
    b.take(Request(1, 0, 0.4))  # a has 0.3 free, b 0.6
    units = [Unit((1, 1), (1,), Request(1, 0, 0.3)), Unit((2, 2), (2,), Request(1, 0, 0.6))]
    assert placed(units, [a, b], Strategy.CONCENTRATED) == 1
    assert placed(units, [a, b], Strategy.FRAGMENTATION_AWARE) == 2


def test_a_task_without_gpus_leaves_the_cores_gpu_tasks_need() -> None:
    small, big = worker("small", 2, cpu=8), worker("big", 2, cpu=64)  # concentrated fills small's cores first
    units = [Unit((1, 1), (1,), Request(8, 0, 0))]
    units += [Unit((j, j), (j,), Request(4, 0, 1)) for j in range(2, 6)]
    assert placed(units, [small, big], Strategy.CONCENTRATED) == 3
    assert placed(units, [small, big], Strategy.FRAGMENTATION_AWARE) == 5


def test_a_single_gpu_keeps_off_the_whole_worker_a_gang_of_eight_needs() -> None:
    eight, four = worker("eight", 8), worker("four", 4, cpu=32)
    units = [Unit((1, 1), (1,), Request(1, 0, 1)), Unit((2, None), (2,), Request(8, 0, 8))]
    mix = RequestMix.of([(Request(8, 0, 8), ()), (Request(1, 0, 1), ())])
    result = place(units, [eight, four], policy=policy(Strategy.FRAGMENTATION_AWARE), mixes={"default": mix})
    assert [a.worker_id for key in sorted(result.assignments) for a in result.assignments[key]] == ["four", "eight"]


def test_the_device_a_share_takes_is_the_one_that_fragments_least() -> None:
    room = worker("w", 2)
    room.take(Request(1, 0, 0.5), device=0)
    room.take(Request(1, 0, 0.8), device=1)  # device 0 has 0.5 free, device 1 has 0.2
    book = RoomBook([room], {"default": Fragmentation(RequestMix.of([(Request(1, 0, 0.5), ())]).weights())})
    group = book.group("default", ())
    # Device 1 is taken: 0.5 stays whole for the kind the pool asks for.
    assert book.place(group, Request(1, 0, 0.2), Strategy.FRAGMENTATION_AWARE) == (0, [1])


def test_without_a_mix_it_measures_by_the_running_and_pending_tasks() -> None:
    a, b = worker("a", 1, cpu=16), worker("b", 1, cpu=8)
    a.take(Request(1, 0, 0.7))
    b.take(Request(1, 0, 0.4))
    units = [Unit((1, 1), (1,), Request(1, 0, 0.3))] + [Unit((j, j), (j,), Request(1, 0, 0.6)) for j in (2, 3)]
    assert placed(units, [a, b], Strategy.FRAGMENTATION_AWARE) == 2


# -- the request mix --------------------------------------------------------------------------------------------


def test_the_mix_weighs_recent_requests_most_ignores_tasks_without_gpus_and_stays_bounded() -> None:
    mix = RequestMix(half_life=1)
    old, new = Request(1, 0, 1), Request(1, 0, 0.5)
    mix.add(old)
    mix.add(Request(4, 0, 0))
    mix.add(new)
    weights = mix.weights()
    assert set(weights) == {(old, ()), (new, ())} and weights[(new, ())] == 2 * weights[(old, ())]
    assert abs(sum(weights.values()) - 1) < 1e-9
    small = RequestMix(max_kinds=3)
    for h in range(1, 10):
        small.add(Request(1, 0, h / 100))
    assert len(small.counts) == 3 and (Request(1, 0, 0.09), ()) in small.counts
    assert RequestMix().weights() == {}


def test_the_schedule_handler_counts_each_unit_once_and_forgets_the_oldest() -> None:
    handler = ScheduleJobs()
    handler.remembered_units = 2
    unit = Unit((1, 1), (1,), Request(1, 0, 0.5))
    handler._count([unit])
    handler._count([unit])
    assert handler.mixes["default"].counts[(unit.request, ())] == 1
    for j in (2, 3):
        handler._count([Unit((j, j), (j,), Request(1, 0, 1))])
    assert list(handler.counted) == [(2, 2), (3, 3)]


# -- properties -------------------------------------------------------------------------------------------------

gpu_amounts = st.one_of(st.integers(1, 99).map(lambda h: h / 100), st.integers(0, 4))
requests = st.builds(lambda cpu, host, gpu, device: Request(cpu, host * GB, gpu, gpu_memory=device * GB),
                     st.integers(0, 16), st.integers(0, 96), gpu_amounts, st.sampled_from([0, 0, 8, 20]))
workers = st.builds(lambda n, gpus, cpu, memories: worker(f"w{n}", gpus, cpu, memories[:gpus] if memories else ()),
                    st.integers(0, 10**6), st.integers(0, 8), st.integers(4, 64),
                    st.sampled_from([(), (16 * GB,) * 8, (24 * GB, 80 * GB) * 4]))


@settings(max_examples=150, deadline=None)
@given(st.lists(workers, min_size=1, max_size=6, unique_by=lambda w: w.id),
       st.lists(st.tuples(requests, st.integers(1, 3), st.booleans(), st.booleans()), min_size=1, max_size=25))
def test_it_never_overfills_a_worker_or_a_device_and_places_gangs_whole(rooms: list[WorkerRoom], jobs: list) -> None:
    units = [Unit((j, None if gang else j), tuple(range(j * 10, j * 10 + (tasks if gang else 1))), request,
                  spread=spread)
             for j, (request, tasks, gang, spread) in enumerate(jobs, start=1)]
    result = place(units, rooms, policy=policy(Strategy.FRAGMENTATION_AWARE))
    by_id = {room.id: room for room in rooms}
    cpu, host, whole = defaultdict(float), defaultdict(int), defaultdict(list)
    shares, memory = defaultdict(int), defaultdict(int)
    for unit in units:
        assignments = result.assignments.get(unit.key)
        if assignments is None:
            continue
        assert len(assignments) == len(unit.task_ids)  # whole or not at all
        if unit.spread:
            assert len({a.worker_id for a in assignments}) == len(assignments)
        for a in assignments:
            cpu[a.worker_id] += unit.request.cpu
            host[a.worker_id] += unit.request.memory
            if unit.request.share:
                assert len(a.gpu_ids) == 1  # never two devices for one share
                shares[a.worker_id, a.gpu_ids[0]] += unit.request.share
                memory[a.worker_id, a.gpu_ids[0]] += unit.request.gpu_memory
            else:
                assert len(a.gpu_ids) == unit.request.whole
                whole[a.worker_id] += a.gpu_ids
                room = by_id[a.worker_id]
                assert all(room.device_memory(d) >= unit.request.gpu_memory for d in a.gpu_ids)
    for worker_id, used in cpu.items():
        assert used <= by_id[worker_id].cpu + 1e-9 and host[worker_id] <= by_id[worker_id].memory
    for worker_id, devices in whole.items():
        assert len(devices) == len(set(devices)) and all(0 <= d < by_id[worker_id].gpu for d in devices)
        assert not any((worker_id, d) in shares for d in devices)  # a shared device is never handed out whole
    for (worker_id, device), used in shares.items():
        assert used <= SHARES and 0 <= device < by_id[worker_id].gpu
        assert memory[worker_id, device] <= by_id[worker_id].device_memory(device)


def test_an_empty_kept_mix_gives_way_to_the_tasks_in_view() -> None:
    a, b = worker("a", 1, cpu=16), worker("b", 1, cpu=8)
    a.take(Request(1, 0, 0.7))
    b.take(Request(1, 0, 0.4))
    units = [Unit((1, 1), (1,), Request(1, 0, 0.3)), Unit((2, 2), (2,), Request(1, 0, 0.6))]
    result = place(units, [a, b], policy=policy(Strategy.FRAGMENTATION_AWARE), mixes={"default": RequestMix()})
    assert len(result.assignments) == 2


def test_a_pool_with_gpus_is_fragmentation_aware_unless_set_and_one_without_is_concentrated() -> None:
    assert PoolPolicy().strategy is None
    a, b = worker("a", 1, cpu=16), worker("b", 1, cpu=8)
    a.take(Request(1, 0, 0.7))
    b.take(Request(1, 0, 0.4))
    units = [Unit((1, 1), (1,), Request(1, 0, 0.3)), Unit((2, 2), (2,), Request(1, 0, 0.6))]
    fifo = Policy(pools={"default": PoolPolicy(**FIFO)})
    assert len(place(units, [a, b], policy=fifo).assignments) == 2
    cpu_only = [worker("x", 0, cpu=4), worker("y", 0, cpu=8)]
    result = place([Unit((1, 1), (1,), Request(4, 0, 0))], cpu_only, policy=fifo)
    assert result.assignments[(1, 1)][0].worker_id == "x"  # the fullest that fits


MIX_KINDS = st.lists(st.tuples(st.sampled_from([(1, 0, 1), (1, 0, 2), (2, 0, 1), (1, 0, 0), (1, 0, 0.5)]),
                               st.sampled_from([(), ("zone=a",)]), st.integers(1, 3), st.integers(1, 4)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(kinds=MIX_KINDS, half_life=st.sampled_from([2_000, 5, 1, 0.2]), max_kinds=st.sampled_from([512, 2, 3]))
def test_a_mix_counted_at_once_is_the_mix_counted_one_by_one(kinds, half_life, max_kinds):
    """add_all counts as add does request by request, a run's request `repeats` times in a row, to the last bit: each
    request its own object (as each row reads one), renormalised (a short half life) and pruned (few kinds kept) on
    the way."""
    from corral.core.constraints import parse_constraint
    runs = [(Request(*fields), tuple(parse_constraint(c) for c in constraints), times, repeats)
            for fields, constraints, times, repeats in kinds]
    one_by_one, at_once = RequestMix(half_life, max_kinds), RequestMix(half_life, max_kinds)
    for request, constraints, times, repeats in runs:
        for _ in range(repeats):
            one_by_one.add(request, constraints, times)
    at_once.add_all(runs)
    assert list(at_once.counts.items()) == list(one_by_one.counts.items())
    assert [id(request) for request, _ in at_once.counts] == [id(request) for request, _ in one_by_one.counts]
    assert at_once.scale == one_by_one.scale


def test_a_mix_counts_a_run_of_equal_requests_without_hashing_each(monkeypatch):
    """A row of equal requests (a job's tasks, each reading its own) is counted with its first request hashed, not
    every one of them."""
    hashed = []
    monkeypatch.setattr(Request, "__hash__", lambda self: hashed.append(self) or self._hash)
    mix = RequestMix()
    mix.add_all([(Request(1, 0, 1), (), 1, 1) for _ in range(100)] + [(Request(2, 0, 2), (), 1, 1) for _ in range(100)])
    assert len(hashed) <= 8  # per run: its count found and set as `add` does, read, and written at its end
    assert list(mix.weights()) == [(Request(1, 0, 1), ()), (Request(2, 0, 2), ())]
