"""Shares of one GPU in placement (DESIGN.md, Scheduling): a share never spans two devices, and the shares of one
device add up to at most the whole of it and to at most its memory."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.scheduling.placement import Request, Unit, WorkerRoom, place
from corral.scheduling.rooms import SHARES, gpu_share

GB = 10**9


def room(gpus: int = 2, memories: tuple[int, ...] = ()) -> WorkerRoom:
    return WorkerRoom("w", "w", 64, 256 * GB, gpus, 64, 256 * GB, list(range(gpus)), gpu_memory=memories)


def share(gpu: float, gpu_memory: int = 0) -> Request:
    return Request(1, 0, gpu, gpu_memory=gpu_memory)


def test_a_share_is_kept_in_hundredths_and_whole_devices_are_not_shares() -> None:
    assert (gpu_share(0.25), gpu_share(0.01), gpu_share(0.99)) == (25, 1, 99)
    assert (gpu_share(0), gpu_share(1), gpu_share(4)) == (0, 0, 0)
    assert (share(0.5).share, share(0.5).whole, share(2).share, share(2).whole) == (50, 0, 0, 2)


def test_shares_fill_one_device_before_they_open_another() -> None:
    r = room(2)
    assert [r.take(share(0.5)), r.take(share(0.25)), r.take(share(0.25))] == [[0], [0], [0]]
    assert r.gpu_shared == {0: 100} and r.free_gpu_ids == [1]
    assert r.take(share(0.3)) == [1]
    assert not r.fits(Request(1, 0, 1))  # both devices hold shares: none is whole
    assert r.free_share() == 0.7


def test_a_shared_device_is_whole_again_once_its_shares_are_given_back() -> None:
    r = room(1)
    r.take(share(0.4))
    r.take(share(0.6))
    assert not r.fits(share(0.01))
    r.give(share(0.4), [0])
    assert r.fits(share(0.4)) and not r.fits(Request(1, 0, 1))
    r.give(share(0.6), [0])
    assert r.gpu_shared == {} and r.free_gpu_ids == [0] and r.fits(Request(1, 0, 1))


def test_shares_reserve_device_memory_and_add_up_to_at_most_it() -> None:
    r = room(2, (24 * GB, 80 * GB))
    assert r.take(share(0.25, 20 * GB)) == [0]  # the smallest device that holds it
    assert r.take(share(0.25, 20 * GB)) == [1]  # 4G left on device 0
    assert r.take(share(0.25, 40 * GB)) == [1]
    assert not r.fits(share(0.25, 30 * GB))  # 20G left on device 1
    assert r.free_share(30 * GB) == 0.0 and r.free_share(4 * GB) == 0.75


def test_place_hands_a_share_one_device_and_packs_shares_together() -> None:
    units = [Unit((j, j), (j,), share(0.5)) for j in range(1, 4)]
    result = place(units, [room(2)])
    devices = [a.gpu_ids for key in sorted(result.assignments) for a in result.assignments[key]]
    assert devices == [(0,), (0,), (1,)]


requests = st.one_of(st.integers(1, 99).map(lambda h: share(h / 100)), st.integers(1, 3).map(share))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(requests, st.booleans()), max_size=30))
def test_shares_never_overfill_a_device_and_give_undoes_take(steps: list[tuple[Request, bool]]) -> None:
    r, held = room(4), []
    for request, release in steps:
        if release and held:
            r.give(*held.pop())
        elif r.fits(request):
            gpu_ids = r.take(request)
            assert len(gpu_ids) == max(request.whole, 1)
            held.append((request, gpu_ids))
        in_use = {d: 0 for d in range(4)}
        for request_, gpu_ids in held:
            for d in gpu_ids:
                in_use[d] += request_.share or SHARES
        assert all(used <= SHARES for used in in_use.values())
        assert sorted(r.free_gpu_ids) == [d for d, used in in_use.items() if used == 0]
        assert r.gpu_shared == {d: used for d, used in in_use.items() if used > 0 and any(
            q.share and d in ids for q, ids in held)}
