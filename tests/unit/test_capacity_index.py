"""The capacity index kept by deltas equals one rebuilt from scratch after any sequence of changes, and
placement over it decides as placement over the rooms and tasks read afresh."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import replace
from itertools import count

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core.config import PoolPolicy, Sequencer, Strategy
from corral.core.constraints import parse_constraint
from corral.scheduling.capacity import CapacityIndex
from corral.scheduling.fragmentation import Fragmentation, RequestMix
from corral.scheduling.placement import Unit, place, place_over
from corral.scheduling.policy import Policy
from corral.scheduling.preemption import RunningTask
from corral.scheduling.rooms import RANKED, Members, Request, RoomBook, WorkerRoom, rank_key

GiB = 2**30
POOLS = ("a", "b")
CONSTRAINTS = ((), (parse_constraint("zone=x"),))
# Amounts are multiples of a power of two, so that sums are exact whatever order they are added in.
REQUESTS = st.builds(Request, cpu=st.sampled_from([0.25, 0.5, 1.0, 2.0]), memory=st.sampled_from([0, GiB]),
                     gpu=st.sampled_from([0, 1, 2, 0.25, 0.5]), custom=st.sampled_from([(), (("fpga", 1.0),)]))


def worker(n: int) -> WorkerRoom:
    """The worker `w<n>`, all its room free: the same worker each time it joins."""
    gpus, custom = (0, 2, 4, 8)[n % 4], {"fpga": 2.0} if n % 3 == 0 else {}
    memory = tuple(80 * GiB if d % 2 else 24 * GiB for d in range(gpus)) if n % 5 == 1 else ()
    return WorkerRoom(f"w{n}", f"w{n}", 8.0, 16 * GiB, gpus, 8.0, 16 * GiB, list(range(gpus)),
                      pool=POOLS[n % 2], labels={"zone": "x" if n % 3 else "y"}, custom=dict(custom),
                      free_custom=dict(custom), gpu_memory=memory)


def rebuilt(alive: list[str], tasks: dict[int, RunningTask]) -> CapacityIndex:
    """The index as a restart builds it: each alive worker's room less what the tasks on it hold."""
    rooms = []
    for worker_id in alive:
        room = worker(int(worker_id[1:]))
        for task in tasks.values():
            if task.worker_id == worker_id:
                room.hold(task.request, task.gpu_ids)
        rooms.append(room)
    return CapacityIndex(rooms, tasks.values())


def nonzero(use: dict) -> dict:
    """Use with the resources at zero left out (a use read as missing is zero)."""
    return {key: {r: a for r, a in amounts.items() if a} for key, amounts in use.items()}


def pool_use(index: CapacityIndex) -> dict:
    return {pool: nonzero(use) for pool, use in index.pool_use.items()}


def state(index: CapacityIndex) -> tuple:
    groups = {(pool, c): (index.group(pool, c), [index.ranked(pool, c, r) for r in RANKED])
              for pool in POOLS for c in CONSTRAINTS}
    return (index.rooms, index.position, list(index.running.values()), nonzero(index.quota_use), pool_use(index),
            index.lowest_priorities(), index.last_placed(), {p: dict(index.capacity(p)) for p in POOLS}, groups,
            dict(index.tasks_of_job), index.sharing)


CHANGES = st.lists(st.tuples(st.sampled_from(["join", "lose", "place", "end", "stop"]), st.integers(0, 7),
                             REQUESTS, st.integers(0, 3), st.integers(0, 2)), max_size=40)
UNITS = st.lists(st.tuples(REQUESTS, st.sampled_from(POOLS), st.sampled_from(CONSTRAINTS), st.integers(1, 3),
                           st.integers(0, 3)), max_size=6)
POLICIES = st.builds(lambda strategy, sequencer, quota: Policy(
    pools={pool: PoolPolicy(strategy=strategy, sequencer=sequencer) for pool in POOLS},
    quotas={"p1": {"gpu": quota}} if quota is not None else {}),
    st.sampled_from([None, *Strategy]), st.sampled_from(list(Sequencer)), st.sampled_from([None, 2.0, 6.0]))


def changed(changes: list[tuple]) -> tuple[CapacityIndex, list[str], dict[int, RunningTask]]:
    """An index kept by deltas through `changes`, with the workers alive and the tasks running after them."""
    index, alive, tasks, next_id = CapacityIndex([]), [], {}, 1
    for change, n, request, priority, moment in changes:
        worker_id = f"w{n}"
        if change == "join":
            index.join(worker(n))
            alive = [w for w in alive if w != worker_id] + [worker_id]
        elif change == "lose":
            index.lose(worker_id)
            alive = [w for w in alive if w != worker_id]
        elif change == "place" and worker_id in alive:
            room = index.rooms[index.position[worker_id]].copy()
            if room.fits(request):
                task = RunningTask(next_id, next_id, worker_id, request, tuple(room.take(request)), priority * 10,
                                   project=f"p{priority % 2}", since=float(moment))
                index.add(task)
                tasks[next_id] = task
                next_id += 1
        elif change in ("end", "stop") and tasks:
            task_id = list(tasks)[n % len(tasks)]
            if change == "end":
                index.remove(task_id)
                del tasks[task_id]
            else:
                index.stop(task_id)
                tasks[task_id] = replace(tasks[task_id], stopping=True)
    return index, alive, tasks


@settings(max_examples=300, deadline=None)
@given(CHANGES, UNITS, POLICIES)
def test_the_index_kept_by_deltas_is_the_one_rebuilt_and_places_alike(changes, units, policy):
    index, alive, tasks = changed(changes)
    fresh = rebuilt(alive, tasks)
    assert state(index) == state(fresh)

    pending = [Unit((100 + j, None), tuple(1000 + 10 * j + t for t in range(size)), request, pool=pool,
                    constraints=constraints, priority=priority * 10 + 5, project=f"p{priority % 2}")
               for j, (request, pool, constraints, size, priority) in enumerate(units)]
    kept = state(index)
    over_index = place_over(pending, index, policy=policy, now=10.0)
    afresh = place(pending, fresh.rooms, policy=policy, running=list(tasks.values()), now=10.0)
    assert (over_index.assignments, over_index.waiting, over_index.victims) == (
        afresh.assignments, afresh.waiting, afresh.victims)
    assert state(index) == kept  # a pass changes nothing in the index


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(1, 6)), max_size=8), st.lists(REQUESTS, min_size=2,
       max_size=2), st.sampled_from(list(Strategy)), st.sampled_from(CONSTRAINTS))
def test_a_run_of_placing_steps_places_as_tasks_placed_one_at_a_time(runs, requests, strategy, constraints):
    """A placing kept across steps (as a pass keeps it for a run of alike tasks), while another request's placing
    changes the same rooms, places each task where a placing made afresh for it does."""
    def book() -> RoomBook:
        rooms = [worker(n) for n in range(8)]
        return RoomBook(rooms, {"a": Fragmentation(RequestMix.of([(r, ()) for r in requests]).weights())})

    kept, afresh = book(), book()
    kept_group, afresh_group = kept.group("a", constraints), afresh.group("a", constraints)
    steps = [kept.placing(kept_group, request, strategy) for request in requests]
    for which, tasks in runs:
        for _ in range(tasks):
            assert next(steps[which]) == afresh.place(afresh_group, requests[which], strategy)
    assert kept.rooms == afresh.rooms


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), REQUESTS), max_size=12), st.sampled_from(POOLS),
       st.sampled_from(CONSTRAINTS))
def test_a_group_first_asked_after_the_book_took_room_is_ordered_by_the_room_left(takes, pool, constraints):
    index = CapacityIndex([worker(n) for n in range(8)])
    book = RoomBook(index.rooms, kept=index)
    for n, request in takes:
        if book.rooms[n].fits(request):
            book.take(n, request)
    group = book.group(pool, constraints)
    assert book.sorted_keys(group) == Members.of(book.rooms, pool, constraints).keys
    for resource in RANKED if group.members else ():
        assert book.most_free(group, resource) == min(rank_key(book.rooms[i], i, resource) for i in group.members)[1]
    assert book.shared_devices(group) == sum(len(book.rooms[i].gpu_shared) for i in group.members)
    assert index.rooms == [worker(n) for n in range(8)]  # the book copied what it changed


MIXES = st.sampled_from([RequestMix.of([(Request(1.0, 0, 1), ())]),
                         RequestMix.of([(Request(1.0, 0, 1), ()), (Request(0.5, GiB, 0.5), CONSTRAINTS[1]),
                                        (Request(2.0, 0, 2), ())])])
ROUNDS = st.lists(st.tuples(st.lists(st.tuples(st.booleans(), st.integers(0, 7), REQUESTS), max_size=8), UNITS,
                            MIXES), min_size=1, max_size=5)


def by_state(measure: Fragmentation, buckets: Mapping[int, set[int]]) -> dict:
    return {measure.states[state]: members for state, members in buckets.items()}


@settings(max_examples=150, deadline=None)
@given(ROUNDS)
def test_the_fragmentation_kept_across_passes_is_the_one_measured_afresh(rounds):
    """Passes and changes of room in turn: the measure and state buckets the index keeps equal fresh ones, and a
    fragmentation-aware pass over the index decides as one over a fresh index."""
    index = CapacityIndex([worker(n) for n in range(8)])
    tasks: dict[int, RunningTask] = {}
    task_ids = count(1)
    policy = Policy(pools={pool: PoolPolicy(strategy=Strategy.FRAGMENTATION_AWARE) for pool in POOLS})
    for changes, units, mix in rounds:
        for end, n, request in changes:
            room = index.rooms[n].copy()
            if end and tasks:
                index.remove(tasks.pop(list(tasks)[n % len(tasks)]).task_id)
            elif not end and room.fits(request):
                task = RunningTask(next(task_ids), 1, room.id, request, tuple(room.take(request)), 0)
                index.add(task)
                tasks[task.task_id] = task
        fresh = rebuilt([f"w{n}" for n in range(8)], tasks)
        for pool in POOLS:
            kept, afresh = index.fragmentation(pool, mix.weights()), fresh.fragmentation(pool, mix.weights())
            for constraints in CONSTRAINTS:
                assert by_state(kept, index.buckets(pool, constraints)) == by_state(
                    afresh, fresh.buckets(pool, constraints))
            for i, room in enumerate(index.rooms):
                if room.pool == pool:
                    assert kept.score(index.states()[i]) == afresh.score(afresh.state(room))
        pending = [Unit((100 + j, None), tuple(1000 + 10 * j + t for t in range(size)), request, pool=pool,
                        constraints=constraints) for j, (request, pool, constraints, size, _) in enumerate(units)]
        mixes = dict.fromkeys(POOLS, mix)
        over_kept = place_over(pending, index, policy=policy, now=1.0, mixes=mixes)
        over_fresh = place_over(pending, fresh, policy=policy, now=1.0, mixes=mixes)
        assert (over_kept.assignments, over_kept.waiting) == (over_fresh.assignments, over_fresh.waiting)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["place", "end", "read"]), st.integers(0, 23), REQUESTS), max_size=40))
def test_views_read_between_changes_are_those_of_a_fresh_index(changes):
    """The sorted views are brought up to date when read, by moving the few rooms that changed or by sorting afresh
    when many did: read between any run of changes, they are those a fresh index sorts."""
    index = CapacityIndex([worker(n) for n in range(24)])  # groups of 8 and 12: one change moves, two sort
    tasks: dict[int, RunningTask] = {}
    task_ids = count(1)

    def views(of: CapacityIndex) -> dict:
        return {(pool, c): (of.group(pool, c).keys, [of.ranked(pool, c, r) for r in RANKED])
                for pool in POOLS for c in CONSTRAINTS}

    views(index)  # asked once: kept from now on
    for change, n, request in [*changes, ("read", 0, None)]:
        room = index.rooms[n].copy()
        if change == "read":
            assert views(index) == views(rebuilt([f"w{n}" for n in range(24)], tasks))
        elif change == "end" and tasks:
            index.remove(tasks.pop(list(tasks)[n % len(tasks)]).task_id)
        elif change == "place" and room.fits(request):
            task = RunningTask(next(task_ids), 1, room.id, request, tuple(room.take(request)), 0)
            index.add(task)
            tasks[task.task_id] = task


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.lists(st.tuples(st.integers(0, 7), REQUESTS, st.integers(0, 3),
                                                            st.integers(0, 2)), max_size=8)), max_size=8))
def test_changes_made_at_once_leave_the_index_as_made_one_by_one(batches):
    """add_all and remove_all, which charge alike tasks' use at once, leave what add and remove leave task by task."""
    alive = [worker(n) for n in range(6)]  # w6 and w7 are not alive: their tasks are on record only
    at_once, one_by_one, tasks, next_id = CapacityIndex(alive), CapacityIndex(alive), {}, 1
    for placing, changes in batches:
        if placing:
            placed = []
            for n, request, priority, moment in changes:
                i = at_once.position.get(f"w{n}")
                room = worker(n) if i is None else at_once.rooms[i].copy()
                for task in placed:  # what this batch already placed there
                    if task.worker_id == room.id:
                        room.hold(task.request, task.gpu_ids)
                if room.fits(request):
                    placed.append(RunningTask(next_id, next_id % 3, room.id, request, tuple(room.take(request)),
                                              priority * 10, project=f"p{priority % 2}", since=float(moment)))
                    next_id += 1
            at_once.add_all(placed)
            for task in placed:
                one_by_one.add(task)
                tasks[task.task_id] = task
        else:
            ended = list(dict.fromkeys(list(tasks)[n % len(tasks)] for n, *_ in changes)) if tasks else []
            at_once.remove_all(ended)
            for task_id in ended:
                one_by_one.remove(task_id)
                del tasks[task_id]
        assert state(at_once) == state(one_by_one)


def test_alike_tasks_in_a_row_holding_one_request_hash_it_once(monkeypatch):
    """add_all and remove_all charge a run of alike tasks holding one request object without hashing it per task."""
    request = Request(1.0, GiB, 0)
    hashed = []
    monkeypatch.setattr(Request, "__hash__", lambda self: hashed.append(self) or self._hash)
    index = CapacityIndex([worker(0), worker(2)])
    tasks = [RunningTask(n, 7, f"w{2 * (n % 2)}", request, (), 100) for n in range(1, 9)]
    index.add_all(tasks)
    index.remove_all([task.task_id for task in tasks])
    assert len(hashed) == 4  # per call (the row placed, the row ended): its count found, then set; not per task
    assert index.quota_use == {} and index.running == {}


def test_alike_running_tasks_read_each_with_its_own_request_are_counted_by_rows_without_hashing_each(monkeypatch):
    """The index's build counts a row of alike tasks, each holding its own equal request (as each row reads one), with
    no request hashed per task, and the use it charges is the one charged task by task."""
    hashed = []
    tasks = [RunningTask(n, 7 + n // 5, f"w{2 * (n % 2)}", Request(0.25 if n < 12 else 0.5, GiB, 0), (), 100,
                         project="q" if n == 7 else "p") for n in range(1, 21)]  # four rows: 1-6, 7, 8-11, 12-20
    one_by_one = CapacityIndex([worker(0), worker(2)])
    for task in tasks:
        one_by_one.add(task)
    monkeypatch.setattr(Request, "__hash__", lambda self: hashed.append(self) or self._hash)
    built = CapacityIndex([worker(0), worker(2)], tasks)
    assert len(hashed) <= 2 * 4  # per row: its count found, then set (task by task, twice per task)
    # (the rooms aside: the build takes them net of the tasks, `add` takes room from them)
    assert list(built.quota_use.items()) == list(one_by_one.quota_use.items())
    assert list(built.pool_use["a"].items()) == list(one_by_one.pool_use["a"].items())
    assert (built.running, built.lowest_priorities(), built.last_placed(), built.tasks_of_job) == (
        one_by_one.running, one_by_one.lowest_priorities(), one_by_one.last_placed(), one_by_one.tasks_of_job)


def test_alike_tasks_ending_each_with_its_own_equal_request_are_given_back_by_rows_without_hashing_each(monkeypatch):
    """Tasks read running each hold their own request: those that end together are given back by rows of equal
    requests (one hashed per row, not per task), and leave the index as their removal one by one leaves it."""
    tasks = [RunningTask(n, 7 + n // 5, f"w{2 * (n % 2)}", Request(0.25 if n < 12 else 0.5, GiB, 0), (), 100,
                         project="q" if n == 7 else "p") for n in range(1, 21)]  # four rows: 1-6, 7, 8-11, 12-20
    at_once, one_by_one = CapacityIndex([worker(0), worker(2)], tasks), CapacityIndex([worker(0), worker(2)], tasks)
    hashed = []
    monkeypatch.setattr(Request, "__hash__", lambda self: hashed.append(self) or self._hash)
    at_once.remove_tasks([at_once.running[n] for n in range(1, 19)])
    assert len(hashed) <= 2 * 4  # per row: its count found, then set
    for n in range(1, 19):
        one_by_one.remove(n)
    assert state(at_once) == state(one_by_one)


def test_tasks_removed_as_held_leave_the_index_as_removed_by_id():
    tasks = [RunningTask(n, 7, f"w{2 * (n % 2)}", Request(1.0, GiB, 0), (), 100) for n in range(1, 9)]
    by_id, as_held = CapacityIndex([worker(0), worker(2)], tasks), CapacityIndex([worker(0), worker(2)], tasks)
    by_id.remove_all([1, 2, 5])
    as_held.remove_tasks([as_held.running[1], as_held.running[2], as_held.running[5]])
    assert state(as_held) == state(by_id)


def test_a_forecasts_index_counts_only_the_capped_jobs_keeps_no_tasks_per_worker_and_finds_turns_when_asked():
    """A forecast's workers never change, only its capped jobs' counts are read, and turns only where a pool takes
    them: the rest is not kept, and the room, use and latest placement are those of an index that keeps all."""
    tasks = [RunningTask(n, 6 + n, "w3" if n < 3 else "w1", Request(1.0, 0, 1), (n % 2,), 0, since=float(n))
             for n in (1, 2, 3)]
    full = CapacityIndex([worker(1), worker(3)], tasks[:1])
    lean = CapacityIndex([worker(1), worker(3)], tasks[:1], capped=frozenset({8}), workers_change=False, turns=False)
    for index in (full, lean):
        index.add_all(tasks[1:])
    assert full.tasks_of_job == {7: 1, 8: 1, 9: 1} and lean.tasks_of_job == {8: 1}
    assert dict(full.on_worker) == {"w3": {1, 2}, "w1": {3}} and not lean.on_worker
    assert lean.rooms == full.rooms and pool_use(lean) == pool_use(full)
    assert lean.last_placed() == full.last_placed() == {"b": "w1"}
    for index in (full, lean):
        index.remove_all([2, 3])
    assert lean.last_placed() == full.last_placed() == {"b": "w3"}
    assert not lean.tasks_of_job and not lean.on_worker


@settings(max_examples=200, deadline=None)
@given(CHANGES, st.lists(st.integers(0, 11), unique=True, max_size=6))
def test_workers_joined_at_once_are_as_joined_one_by_one(changes, joining):
    """Workers on record or not, some with tasks on record: the index is the one their joins in turn make."""
    at_once, one_by_one = changed(changes)[0], changed(changes)[0]
    at_once.join_all([worker(n) for n in joining])
    for n in joining:
        one_by_one.join(worker(n))
    assert state(at_once) == state(one_by_one)


@settings(max_examples=200, deadline=None)
@given(CHANGES, st.lists(st.integers(0, 11), max_size=8))
def test_workers_lost_at_once_are_as_lost_one_by_one(changes, losing):
    """Workers alive or not, some named twice, some with tasks on record: the index is the one their losses in turn
    make."""
    at_once, one_by_one = changed(changes)[0], changed(changes)[0]
    at_once.lose_all([f"w{n}" for n in losing])
    for n in losing:
        one_by_one.lose(f"w{n}")
    assert state(at_once) == state(one_by_one)


def test_a_reason_for_want_of_gpus_where_none_is_free_names_the_first_member_without_ranking_the_group():
    """Where no member has a GPU free (the index's rooms as it counts them, the pass's as it left them), every member
    is as free as any: the first registered is the one the ranked view gives, found without building that view (a
    sort of the whole group, each pass a unit waits for GPUs). With a GPU free again, the view decides."""
    rooms = [WorkerRoom(f"w{n}", f"w{n}", 8.0, 16 * GiB, 2, 8.0 - 0.5 * bool(n), 16 * GiB, [] if n else [0, 1],
                        pool="a") for n in range(4)]  # 2 GPUs each, those of all but the first held
    running = [RunningTask(n, 7, room.id, Request(0.25, 0, 1), (gpu,), 100) for n, (room, gpu) in
               enumerate(((room, gpu) for room in rooms[1:] for gpu in range(2)), start=1)]
    index = CapacityIndex(rooms, running)
    assert index.group("a", ()).gpuless == 3
    book = RoomBook(index.rooms, kept=index)
    group = book.group("a", ())
    book.take(0, Request(0.25, 0, 2))  # the pass takes the last free GPUs
    assert book.most_free(group, "gpu") == group.members[0] == 0
    assert not index._ranked  # no view of the group sorted
    book.give(1, Request(0.25, 0, 1), (0,))  # one given back (a gang undone): it has the most free now
    assert book.most_free(group, "gpu") == 1
    ended = index.running[3]
    index.remove(ended.task_id)  # its room free again: the index counts one member fewer with none free
    assert index.group("a", ()).gpuless == 2


def test_the_rooms_a_pass_leaves_kept_are_those_holding_its_tasks_gives():
    """An owner that starts every assignment keeps the rooms the pass took from (`Placement.rooms`) rather than
    holding each task's room again: the index is the one holding them gives, room for room. A room a gang that did
    not fit whole gave back to is not kept (its copy carries the rollback's rounding): its tasks are held."""
    def rooms() -> list[WorkerRoom]:
        return [WorkerRoom(f"w{i}", f"w{i}", 1.0, 2**35, 2, 1.0, 2**35, [0, 1], pool="a" if i < 2 else "default")
                for i in range(4)]

    units = [Unit((1, None), (11, 12, 13), Request(0.1, 0, 2), pool="a"),  # takes both of pool a, then gives back
             Unit((2, 21), (21,), Request(0.3, 0, 1)), Unit((3, 31), (31,), Request(0.3, 0, 1)),
             Unit((4, None), (41, 42), Request(0.1, 0, 1))]
    kept, held = CapacityIndex(rooms()), CapacityIndex(rooms())
    placement = place_over(units, kept)
    assert set(placement.assignments) == {(2, 21), (3, 31), (4, None)}
    tasks = [RunningTask(a.task_id, key[0], a.worker_id, unit.request, a.gpu_ids, 0, gang=len(unit.task_ids) > 1)
             for unit in units for key, assignments in placement.assignments.items() if key == unit.key
             for a in assignments]
    given_back = {0, 1}
    assert set(placement.rooms) == {2, 3}
    kept.add_placed(tasks, placement.rooms)
    held.add_all(tasks)
    assert all(kept.rooms[i] is room for i, room in placement.rooms.items())
    assert [vars(room) for room in kept.rooms] == [vars(room) for room in held.rooms]
    assert all(kept.rooms[i] is not placement_room for i in given_back
               for placement_room in placement.rooms.values())
    assert kept.group("default", ()) == held.group("default", ())
    more = [Unit((5, 51), (51,), Request(0.2, 0, 1)), Unit((6, None), (61, 62), Request(0.1, 0, 1), pool="a")]
    assert place_over(more, kept) == place_over(more, held)


def test_a_rooms_copy_keeps_its_fields_in_a_dictionary_of_its_own_keys():
    """A copy's fields are read by a pass some twenty times a placed task: held in a dictionary that shares the
    class's keys (as `__dict__.copy()` makes one), no read of them is specialised; in one of its own keys, they are."""
    original = worker(3)
    copied = original.copy()
    shared_keys = original.__dict__.copy()
    assert sys.getsizeof(copied.__dict__) == sys.getsizeof(dict(shared_keys)) != sys.getsizeof(shared_keys)
    assert copied == original and copied.free_gpu_ids is not original.free_gpu_ids


def test_rooms_restated_alike_in_one_settle_move_between_buckets_together():
    """Most rooms of a group moved at once between the same two states, as a forecast's pass moves them (the settle
    moves them a pair of states at a time), a few between others: the kept buckets and the count of members with no
    GPU free are those an index built afresh finds."""
    def rooms() -> list[WorkerRoom]:
        return [WorkerRoom(f"w{n}", f"w{n}", 8.0, 16 * GiB, 2, 8.0, 16 * GiB, [0, 1], pool="a") for n in range(8)]
    weights = RequestMix.of([(Request(1.0, 0, 1), ())]).weights()
    index = CapacityIndex(rooms())
    index.fragmentation("a", weights)
    index.buckets("a", ())
    assert index.group("a", ()).gpuless == 0
    taken = [(n, Request(1.0, 0, 2 if n < 5 else 1)) for n in range(7)]
    after = rooms()
    for task_id, (n, request) in enumerate(taken, start=1):
        index.add(RunningTask(task_id, 1, f"w{n}", request, tuple(after[n].take(request)), 0))
    fresh = CapacityIndex(after)
    kept, afresh = index.fragmentation("a", weights), fresh.fragmentation("a", weights)
    assert by_state(kept, index.buckets("a", ())) == by_state(afresh, fresh.buckets("a", ()))
    assert index.group("a", ()).gpuless == fresh.group("a", ()).gpuless == 5
    for task_id in (1, 2, 6):
        index.remove(task_id)
    assert index.group("a", ()).gpuless == 3
