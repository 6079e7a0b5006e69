"""A task alike the one placed just before is placed by choosing a worker only, and one alike a blocked task that
can neither preempt nor wait behind held room waits for its reason at once: the pass decides exactly what it
decides when every unit goes through every check (any strategy, sequencer, reservation, preemption, quota, cap)."""

from __future__ import annotations

from dataclasses import fields, replace
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core.config import PoolPolicy, Sequencer, Strategy
from corral.scheduling.placement import Assignment, Unit, _Pass, assigned, place
from corral.scheduling.policy import Policy
from corral.scheduling.preemption import RunningTask
from corral.scheduling.rooms import Request
from tests.unit.test_capacity_index import CONSTRAINTS, POOLS, REQUESTS, worker

# Runs of alike tasks: a kind repeated, now and then broken by a gang, an avoiding retry or a capped job.
RUNS = st.lists(st.tuples(REQUESTS, st.sampled_from(POOLS), st.sampled_from(CONSTRAINTS), st.integers(1, 8),
                          st.integers(0, 3), st.sampled_from(["plain", "plain", "gang", "avoid", "capped"]),
                          st.booleans()), max_size=8)
RUNNING = st.lists(st.tuples(st.integers(0, 7), REQUESTS, st.integers(0, 3), st.booleans()), max_size=10)
POLICIES = st.builds(lambda strategy, sequencer, reservation, preemption, quota: Policy(
    pools={pool: PoolPolicy(strategy=strategy, sequencer=sequencer, reservation_time=reservation,
                            preemption=preemption) for pool in POOLS},
    quotas={"p1": {"gpu": quota}} if quota is not None else {}),
    st.sampled_from([None, *Strategy]), st.sampled_from(list(Sequencer)), st.sampled_from([None, 0.0, 5.0]),
    st.booleans(), st.sampled_from([None, 2.0, 6.0]))


def units_of(runs) -> list[Unit]:
    units, job = [], 100
    for request, pool, constraints, count, priority, shape, early in runs:
        since = 0.0 if early else 9.0
        common = dict(pool=pool, constraints=constraints, priority=priority * 10 + 5, project=f"p{priority % 2}",
                      since=since)
        if shape == "gang":
            units.append(Unit((job, None), tuple(job * 100 + t for t in range(count)), request, spread=early,
                              **common))
        else:
            for t in range(count):
                units.append(Unit((job, job * 100 + t), (job * 100 + t,), request,
                                  avoid=frozenset({"w1", "w2"}) if shape == "avoid" and t % 2 else frozenset(),
                                  max_running=count // 2 if shape == "capped" else None, **common))
        job += 1
    return units


def running_on(rooms, tasks) -> list[RunningTask]:
    running, by_id = [], {room.id: room for room in rooms}
    for n, (w, request, priority, stopping) in enumerate(tasks):
        room = by_id.get(f"w{w}")
        if room is not None and room.fits(request):
            running.append(RunningTask(n + 1, n + 1, room.id, request, tuple(room.take(request)), priority * 10,
                                       project=f"p{priority % 2}", since=float(n), stopping=stopping))
    return running


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(0, 11), unique=True, max_size=8), RUNNING, RUNS, POLICIES)
def test_placing_alike_tasks_by_their_choice_alone_decides_as_every_check_does(workers, tasks, runs, policy):
    rooms = [worker(n) for n in workers]
    running = running_on(rooms, tasks)
    units = units_of(runs)
    quick = place(units, rooms, policy=policy, running=running, now=10.0)
    with patch.object(_Pass, "_checks_nothing", lambda self, unit: False):  # every unit through every check
        checked = place(units, rooms, policy=policy, running=running, now=10.0)
    assert (quick.assignments, quick.waiting, quick.victims) == (checked.assignments, checked.waiting,
                                                                 checked.victims)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 11), unique=True, max_size=8), RUNNING, RUNS, POLICIES)
def test_equal_requests_that_are_distinct_objects_decide_as_one_shared_request(workers, tasks, runs, policy):
    """Alike tasks in a row choose with one request object, found by identity: tasks whose requests are only equal
    (each task row reads its own) are placed as those sharing one."""
    rooms = [worker(n) for n in workers]
    running = running_on(rooms, tasks)
    units = units_of(runs)
    apart = [replace(unit, request=replace(unit.request)) for unit in units]
    assert all(a.request == u.request and a.request is not u.request for a, u in zip(apart, units, strict=True))
    shared = place(units, rooms, policy=policy, running=running, now=10.0)
    distinct = place(apart, rooms, policy=policy, running=running, now=10.0)
    assert (shared.assignments, shared.waiting, shared.victims) == (distinct.assignments, distinct.waiting,
                                                                    distinct.victims)


def test_requests_compare_by_their_fields():
    first, second = Request(1.0, 2**30, 1, (("fpga", 1.0),)), Request(1.0, 2**30, 1, (("fpga", 1.0),))
    assert first == second and hash(first) == hash(second) and first is not second
    assert first != Request(1.0, 2**30, 1) and first != Request(1.0, 2**30, 1, (("fpga", 1.0),), gpu_memory=8)
    assert first != (1.0, 2**30, 1, (("fpga", 1.0),), 0) and {first: 1}[second] == 1


def test_alike_tasks_after_the_first_skip_its_checks():
    rooms = [worker(n) for n in (2, 6)]  # pool "a", 8 cores each
    units = [Unit((1, t), (t,), Request(1.0, 0, 0), pool="a") for t in range(12)]
    with patch.object(_Pass, "_absent", autospec=True, side_effect=_Pass._absent) as absent:
        placement = place(units, rooms)
    assert len(placement.assignments) == 12
    assert absent.call_count == 1  # the first task; the other eleven only chose a worker


def test_tasks_alike_a_blocked_one_wait_for_its_reason_at_once():
    rooms = [worker(n) for n in (2, 6)]  # pool "a", 8 cores each
    units = [Unit((1, t), (t,), Request(5.0, 0, 0), pool="a") for t in range(12)]
    with patch.object(_Pass, "_instead_of_waiting", autospec=True, side_effect=_Pass._instead_of_waiting) as waits:
        placement = place(units, rooms)
    assert len(placement.assignments) == 2 and len({id(r) for r in placement.waiting.values()}) == 1
    assert waits.call_count == 2  # the first that did not fit, and the one that found it settles the rest


def test_an_assignment_made_by_a_pass_is_the_one_the_constructor_makes():
    made = assigned(7, "w1", (0, 2))
    assert made == Assignment(7, "w1", (0, 2)) and hash(made) == hash(Assignment(7, "w1", (0, 2)))
    assert all(hasattr(made, f.name) for f in fields(Assignment))  # a field added later is set here too



@pytest.mark.parametrize("run", ["_place_run", "_wait_run"])
@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 11), unique=True, max_size=8), RUNNING, RUNS, POLICIES)
def test_a_run_of_alike_units_taken_off_the_queue_together_decides_as_each_offered_in_turn(run, workers, tasks, runs,
                                                                                           policy):
    """Placed as a run (`_place_run`) or told a settled reason as a run (`_wait_run`): as when each unit goes through
    the queue and `_offer`, the same reason object where it was one."""
    rooms = [worker(n) for n in workers]
    running = running_on(rooms, tasks)
    units = units_of(runs)
    together = place(units, rooms, policy=policy, running=running, now=10.0)
    with patch.object(_Pass, run, lambda self, *queued: None):  # each unit through the queue and _offer
        in_turn = place(units, rooms, policy=policy, running=running, now=10.0)
    assert (together.assignments, together.waiting, together.victims) == (in_turn.assignments, in_turn.waiting,
                                                                          in_turn.victims)
    assert _shared(together.waiting.values()) == _shared(in_turn.waiting.values())


@pytest.mark.parametrize(("count", "sequencer", "offers"), [
    (12, Sequencer.FIFO, 3), (12, Sequencer.PRIORITY, 3), (12, Sequencer.FAIR_SHARE, 12),
    (30, Sequencer.FIFO, 4), (30, Sequencer.PRIORITY, 4), (30, Sequencer.FAIR_SHARE, 30)])
def test_alike_units_are_placed_and_told_to_wait_as_runs_where_the_order_is_fixed_ahead(count, sequencer, offers):
    """Under FIFO and priority order the first unit is offered and the nine alike after it are placed as a run; of those
    that find no room, one fails, one settles the kind, one finds it settled, and the rest wait for that reason as a
    run. Under fair share a placement may change whose turn is next: each is offered."""
    rooms = [worker(n) for n in (2, 6)]  # pool "a", 8 cores each
    units = [Unit((1, t), (t,), Request(1.5, 0, 0), pool="a") for t in range(count)]
    policy = Policy(pools={"a": PoolPolicy(sequencer=sequencer)})
    with patch.object(_Pass, "_offer", autospec=True, side_effect=_Pass._offer) as offer:
        placement = place(units, rooms, policy=policy)
    assert len(placement.assignments) == 10 and len(placement.waiting) == count - 10
    assert len({id(reason) for reason in placement.waiting.values()}) == 1
    assert offer.call_count == offers


def _shared(reasons) -> list[int]:
    """Which reasons are one object: each as the position of the first that is the same object."""
    first: dict[int, int] = {}
    return [first.setdefault(id(reason), n) for n, reason in enumerate(reasons)]
