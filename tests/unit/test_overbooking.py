"""The capacity fence's check: what of a worker the tasks on record hold more of than it has."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from corral.scheduling.rooms import Request, WorkerRoom, overbooking


def room(cpu=8.0, memory=64, gpu=2, gpu_memory=(), custom=None) -> WorkerRoom:
    custom = custom or {}
    return WorkerRoom(id="w", name="w", cpu=cpu, memory=memory, gpu=gpu, free_cpu=cpu, free_memory=memory,
                      free_gpu_ids=list(range(gpu)), gpu_memory=gpu_memory, custom=custom, free_custom=dict(custom))


def test_a_worker_booked_to_the_brim_is_not_over_booked():
    held = [(Request(4, 32, 1), [0]), (Request(4, 32, 0.5), [1]), (Request(0, 0, 0.5), [1])]
    assert overbooking(room(), held) is None


def test_each_resource_over_is_named():
    assert overbooking(room(), [(Request(5, 1, 0), []), (Request(4, 1, 0), [])]) == "cpu: 9 of 8 booked"
    assert overbooking(room(), [(Request(1, 40, 0), []), (Request(1, 40, 0), [])]) == "memory: 80 of 64 bytes booked"
    assert overbooking(room(custom={"tpu": 1.0}), [(Request(1, 1, 0, (("tpu", 1.0),)), [])] * 2) == "tpu: 2 of 1 booked"
    assert overbooking(room(), [(Request(1, 1, 1), [1]), (Request(1, 1, 1), [1])]) == (
        "gpu 1 is held by more than one task")
    assert overbooking(room(), [(Request(1, 1, 1), [0]), (Request(1, 1, 0.3), [0])]) == (
        "gpu 0 is held by more than one task")  # a device held whole holds no share beside it
    assert overbooking(room(), [(Request(1, 1, 0.6), [0]), (Request(1, 1, 0.6), [0])]) == (
        "gpu 0: 120% of it booked as shares")
    shares = [(Request(1, 1, 0.3, gpu_memory=6), [0])] * 2
    assert overbooking(room(gpu_memory=(10, 10)), shares) == "gpu 0: 12 of its 10 bytes booked by shares"
    assert overbooking(room(gpu=1), [(Request(1, 1, 1), [1])]) == "gpu 1 is not one of its 1"


@given(st.lists(st.tuples(st.integers(0, 4), st.sampled_from([0, 0.25, 0.5, 1])), max_size=8))
def test_what_a_room_lets_take_is_never_over_booked_and_one_more_device_is(asks):
    """Whatever `take` hands out fits the room; the same devices given again to a whole-device task do not."""
    whole = room(cpu=100, memory=1000, gpu=4)
    book = whole.copy()
    held = []
    for cpu, gpu in asks:
        request = Request(cpu, 1, gpu)
        if book.fits(request):
            held.append((request, book.take(request)))
    assert overbooking(whole, held) is None
    taken = [device for _, devices in held for device in devices]
    if taken:
        assert overbooking(whole, [*held, (Request(0, 0, 1), [taken[0]])]) is not None
