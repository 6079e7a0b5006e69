"""Placement over a snapshot (DESIGN.md, Scheduling): fits, GPUs, gangs, no head-of-line blocking, reasons."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core.spec_text import format_bytes, parse_bytes
from corral.scheduling.placement import Request, Unit, WorkerRoom, place
from corral.scheduling.reasons import NoRoom, NoWorkerAlive, TooLarge

GiB = 2**30


def room(id_: str, cpu: float = 8, memory: int = 32 * GiB, gpus: int = 0, *, name: str | None = None,
         free_cpu: float | None = None, free_memory: int | None = None, free_gpus: list[int] | None = None):
    return WorkerRoom(id_, name or id_, cpu, memory, gpus, cpu if free_cpu is None else free_cpu,
                      memory if free_memory is None else free_memory,
                      list(range(gpus)) if free_gpus is None else list(free_gpus))


def single(job: int, task: int, cpu: float = 1, memory: int = 0, gpu: int = 0) -> Unit:
    return Unit((job, task), (task,), Request(cpu, memory, gpu))


def gang(job: int, n: int, cpu: float = 1, memory: int = 0, gpu: int = 0) -> Unit:
    return Unit((job, None), tuple(job * 100 + i for i in range(n)), Request(cpu, memory, gpu))


# --- WorkerRoom.fits -------------------------------------------------------------------------------


@pytest.mark.parametrize(("request_", "fits"), [
    (Request(4, 8 * GiB, 2), True),  # exactly the free room
    (Request(4.5, 0, 0), False),
    (Request(1, 8 * GiB + 1, 0), False),
    (Request(1, 0, 3), False),
    (Request(0.5, GiB, 0), True),
    (Request(0, 0, 0), True),
])
def test_fits(request_, fits):
    r = room("w", cpu=16, memory=64 * GiB, gpus=4, free_cpu=4, free_memory=8 * GiB, free_gpus=[1, 3])
    assert r.fits(request_) is fits


def test_fits_tolerates_float_rounding_of_cpu():
    r = room("w", cpu=1, free_cpu=0.1 + 0.2)
    assert r.fits(Request(0.3, 0, 0))


def test_could_ever_fit_uses_capacity_not_free_room():
    r = room("w", cpu=8, memory=16 * GiB, gpus=2, free_cpu=0, free_memory=0, free_gpus=[])
    assert r.could_ever_fit(Request(8, 16 * GiB, 2))
    assert not r.could_ever_fit(Request(9, 0, 0))
    assert not r.could_ever_fit(Request(1, 16 * GiB + 1, 0))
    assert not r.could_ever_fit(Request(1, 0, 3))


def test_take_consumes_room_and_the_first_free_gpus():
    r = room("w", cpu=8, memory=16 * GiB, gpus=4, free_gpus=[2, 0, 3])
    assert r.take(Request(2, GiB, 2)) == [0, 2]  # the first two free, handed out in index order
    assert (r.free_cpu, r.free_memory, r.free_gpu_ids) == (6, 15 * GiB, [3])


# --- place: single tasks ---------------------------------------------------------------------------


def test_task_goes_to_first_worker_where_it_fits():
    rooms = [room("w1", cpu=1), room("w2", cpu=8)]
    result = place([single(1, 10, cpu=2)], rooms)
    (a,) = result.assignments[(1, 10)]
    assert (a.task_id, a.worker_id, a.gpu_ids) == (10, "w2", ())
    assert result.waiting == {}


def test_gpu_ids_are_distinct_and_from_the_free_ones():
    rooms = [room("w1", cpu=16, gpus=8, free_gpus=[1, 2, 5, 6, 7])]
    units = [single(1, 10, gpu=2), single(1, 11, gpu=2), single(1, 12, gpu=2)]
    result = place(units, rooms)
    assert result.assignments[(1, 10)][0].gpu_ids == (1, 2)
    assert result.assignments[(1, 11)][0].gpu_ids == (5, 6)
    assert (1, 12) in result.waiting  # only GPU 7 is left
    assert result.waiting[(1, 12)].sentence() == "needs 2 gpu on one worker; most free on one worker: 1 gpu (w1)"


def test_place_does_not_mutate_the_rooms():
    rooms = [room("w1", cpu=4, gpus=2)]
    place([single(1, 10, cpu=4, gpu=2)], rooms)
    assert (rooms[0].free_cpu, rooms[0].free_memory, rooms[0].free_gpu_ids) == (4, 32 * GiB, [0, 1])


def test_cpu_and_memory_are_shared_across_tasks():
    rooms = [room("w1", cpu=4, memory=8 * GiB)]
    units = [single(1, i, cpu=1, memory=3 * GiB) for i in range(4)]
    result = place(units, rooms)
    assert set(result.assignments) == {(1, 0), (1, 1)}  # memory runs out first
    assert set(result.waiting) == {(1, 2), (1, 3)}


# --- place: gangs ----------------------------------------------------------------------------------


def test_gang_placed_whole_across_workers():
    rooms = [room("w1", gpus=2), room("w2", gpus=2)]
    result = place([gang(1, 4, gpu=1)], rooms)
    placed = result.assignments[(1, None)]
    assert [(a.task_id, a.worker_id, a.gpu_ids) for a in placed] == [
        (100, "w1", (0,)), (101, "w1", (1,)), (102, "w2", (0,)), (103, "w2", (1,)),
    ]


def test_gang_that_does_not_fit_takes_nothing():
    rooms = [room("w1", gpus=2), room("w2", gpus=1)]
    # The gang would take w1's two GPUs and w2's one before failing on its fourth member.
    result = place([gang(1, 4, gpu=1), single(2, 20, gpu=2), single(3, 30, gpu=1)], rooms)
    assert (1, None) not in result.assignments
    assert result.waiting[(1, None)].placeable == 3
    assert result.assignments[(2, 20)][0].gpu_ids == (0, 1)
    assert result.assignments[(2, 20)][0].worker_id == "w1"
    assert result.assignments[(3, 30)][0].worker_id == "w2"


def test_gang_pending_reason_says_how_many_fit():
    rooms = [room("w1", cpu=8, gpus=4, name="gpu-box", free_gpus=[0, 1])]
    result = place([gang(1, 2, gpu=2)], rooms)
    assert result.waiting[(1, None)].sentence() == (
        "gang of 2 needs 2 gpu per task; only 1 fit now; most free on one worker: 2 gpu (gpu-box)"
    )


def test_gang_never_fitting_per_task():
    result = place([gang(1, 2, gpu=8)], [room("w1", gpus=4)])
    assert isinstance(result.waiting[(1, None)], TooLarge)
    assert result.waiting[(1, None)].sentence() == (
        "needs 8 gpu per task; no worker has that much (largest: 4 gpu on w1); waiting for one to join")


# --- no head-of-line blocking ------------------------------------------------------------------------


def test_big_job_does_not_block_a_smaller_one_behind_it():
    rooms = [room("w1", cpu=4, gpus=2)]
    result = place([single(1, 10, cpu=4, gpu=4), gang(2, 3, cpu=2), single(3, 30, cpu=2, gpu=1)], rooms)
    assert set(result.waiting) == {(1, 10), (2, None)}
    assert result.assignments[(3, 30)][0].gpu_ids == (0,)


def test_an_equal_request_behind_a_failed_one_waits_with_the_same_reason():
    rooms = [room("w1", cpu=2)]
    result = place([single(1, 10, cpu=2), single(1, 11, cpu=2), single(1, 12, cpu=2), single(2, 20, cpu=0.5)],
                   rooms)
    assert list(result.assignments) == [(1, 10)]
    assert result.waiting[(1, 11)] == result.waiting[(1, 12)]
    assert (2, 20) in result.waiting  # nothing left at all
    assert result.waiting[(2, 20)].sentence() == "needs 0.5 cpu on one worker; no worker has any cpu free"


# --- pending reasons -------------------------------------------------------------------------------


def test_reason_no_worker_alive():
    result = place([single(1, 10), gang(2, 2)], [])
    for key in ((1, 10), (2, None)):
        assert result.waiting[key].sentence() == "no worker is alive; waiting for one to register"


def test_reason_no_worker_large_enough():
    rooms = [room("w1", cpu=8, memory=16 * 10**9, gpus=4)]
    result = place([single(1, 10, cpu=2, memory=64 * 10**9, gpu=1)], rooms)
    assert result.waiting[(1, 10)].sentence() == (
        "needs 64G memory per task; no worker has that much (largest: 16G memory on w1); waiting for one to join")


def test_reason_names_the_largest_free_room():
    rooms = [
        room("a", cpu=16, gpus=8, name="w1", free_gpus=[0]),
        room("b", cpu=16, gpus=8, name="w3", free_cpu=6, free_memory=10 * GiB, free_gpus=[4, 5, 6, 7]),
        room("c", cpu=64, gpus=0, name="w9"),
    ]
    result = place([single(1, 10, gpu=8)], rooms)
    assert result.waiting[(1, 10)].worker == "w3"
    assert result.waiting[(1, 10)].sentence() == "needs 8 gpu on one worker; most free on one worker: 4 gpu (w3)"


def test_reason_largest_room_is_judged_after_earlier_placements():
    rooms = [room("a", cpu=4, name="small"), room("b", cpu=8, name="big")]
    result = place([single(1, 10, cpu=8), single(2, 20, cpu=5)], rooms)
    assert result.assignments[(1, 10)][0].worker_id == "b"
    assert result.waiting[(2, 20)].sentence() == "needs 5 cpu on one worker; most free on one worker: 4 cpu (small)"


@pytest.mark.parametrize(("size", "text"), [
    (0, "0B"), (512, "512B"), (10**3, "1K"), (1500, "1.5K"), (10**9, "1G"), (40 * 10**9, "40G"), (10**12, "1T"),
    (512 * 10**6, "512M"), (GiB, "1.07G"), (80 * GiB, "85.9G"),
])
def test_reasons_write_sizes_as_the_options_read_them(size, text):
    assert format_bytes(size, compact=True) == text
    assert abs(parse_bytes(text) - size) <= size * 0.005  # what a reason says can be typed back


# --- property: no over-commit, each unit either placed whole or waiting --------------------------------


@st.composite
def worlds(draw):
    rooms = []
    for i in range(draw(st.integers(0, 5))):
        gpus = draw(st.integers(0, 8))
        cpu = draw(st.sampled_from([1.0, 2.0, 4.0, 8.0, 16.0]))
        memory = draw(st.integers(0, 64)) * GiB
        free_gpus = draw(st.lists(st.sampled_from(range(gpus)), unique=True)) if gpus else []
        gpu_memory = tuple(draw(st.lists(st.sampled_from([0, 16 * GiB, 24 * GiB, 80 * GiB]),
                                         min_size=gpus, max_size=gpus))) if draw(st.booleans()) else ()
        rooms.append(WorkerRoom(f"w{i}", f"n{i}", cpu, memory, gpus,
                                draw(st.sampled_from([0.0, 0.5, 1.0, cpu / 2, cpu])),
                                draw(st.integers(0, memory // GiB)) * GiB, free_gpus, gpu_memory=gpu_memory))
    units, next_task = [], 0
    for j in range(draw(st.integers(0, 10))):
        n = draw(st.integers(1, 4)) if draw(st.booleans()) else 1
        gpu = draw(st.integers(0, 4))
        request = Request(draw(st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0, 3.0, 8.0])),
                          draw(st.integers(0, 16)) * GiB, gpu,
                          gpu_memory=draw(st.sampled_from([0, 0, 20 * GiB, 40 * GiB])) if gpu else 0)
        task_ids = tuple(range(next_task, next_task + n))
        next_task += n
        key = (j, None) if n > 1 or draw(st.booleans()) else (j, task_ids[0])
        units.append(Unit(key, task_ids, request))
    return rooms, units


@settings(max_examples=300)
@given(worlds())
def test_placement_never_overcommits(world):
    rooms, units = world
    result = place(units, rooms)
    by_id = {r.id: r for r in rooms}
    used_cpu, used_memory, used_gpus = defaultdict(float), defaultdict(int), defaultdict(list)
    for unit in units:
        placed, waiting = unit.key in result.assignments, unit.key in result.waiting
        assert placed != waiting, unit  # exactly one of the two
        if placed:
            assignments = result.assignments[unit.key]
            assert sorted(a.task_id for a in assignments) == sorted(unit.task_ids)
            for a in assignments:
                assert len(a.gpu_ids) == unit.request.gpu
                assert all(by_id[a.worker_id].device_memory(i) >= unit.request.gpu_memory for i in a.gpu_ids)
                used_cpu[a.worker_id] += unit.request.cpu
                used_memory[a.worker_id] += unit.request.memory
                used_gpus[a.worker_id].extend(a.gpu_ids)
        else:
            w = result.waiting[unit.key]
            assert isinstance(w, NoRoom | TooLarge | NoWorkerAlive), w
            if isinstance(w, NoRoom):
                assert w.tasks == len(unit.task_ids) and 0 <= w.placeable < len(unit.task_ids)
            assert w.sentence()
    assert len(result.assignments) + len(result.waiting) == len(units)
    for worker_id, cpu in used_cpu.items():
        assert cpu <= by_id[worker_id].free_cpu + 1e-6
    for worker_id, memory in used_memory.items():
        assert memory <= by_id[worker_id].free_memory
    for worker_id, gpus in used_gpus.items():
        assert len(gpus) == len(set(gpus)), "a GPU given twice"
        assert set(gpus) <= set(by_id[worker_id].free_gpu_ids)


@given(worlds())
def test_placement_is_deterministic(world):
    rooms, units = world
    assert place(units, rooms) == place(units, rooms)
