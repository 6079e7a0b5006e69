"""Placement: which worker each pending task goes to, decided in memory over a snapshot.

No I/O happens here. The pass reads top to bottom as a person would explain it. Per pool:
  1. units (a gang job whole, or one task of an independent job) are offered room in the
     order of the pool's sequencer: FIFO, priority, or fair share across projects;
  2. a unit that would take its project over quota waits, naming the resource;
  3. a unit that no worker present could hold (none alive, none in its pool, none matching
     its constraints, none large enough) waits, saying so: one may join;
  4. the unit is placed whole with the pool's strategy, or not at all; a retried task
     avoids the workers it failed on when another fits;
  5. a unit that does not fit waits with the binding constraint named, and the units behind
     it go on (no head-of-line blocking), except that:
     a. a unit that only room held for another would fit waits behind that reservation;
     b. in a pool that preempts, a unit that outranks running tasks waits for tasks already
        being evicted, or evicts the cheapest set that makes it fit; that room is held; a gang
        that only fragmentation blocks first moves single tasks that fit elsewhere;
     c. a unit that has waited past its pool's reservation time has the workers closest to
        holding it held for it, so only units that fit elsewhere start (backfill); the
        first of a kind reserves, its equals wait behind it.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from corral.core.config import Strategy
from corral.core.constraints import IMPLICIT, AnyConstraint, PythonConstraint, SharedDirectory
from corral.core.frozen import maker
from corral.core.lifecycle import TargetKey
from corral.scheduling.capacity import CapacityIndex
from corral.scheduling.fragmentation import RequestMix
from corral.scheduling.policy import DEFAULT_POOL, DEFAULT_PROJECT, Policy, PoolPolicy
from corral.scheduling.preemption import RunningTask, VictimPlan, choose_victims
from corral.scheduling.reasons import (
    AtMostRunning,
    AwaitingPreempted,
    BehindReservation,
    Moving,
    NoRoom,
    NoWorkerAlive,
    NoWorkerHasPython,
    NoWorkerInPool,
    NoWorkerMatches,
    NoWorkerShares,
    OverQuota,
    Preempting,
    Reason,
    Reserved,
    TooLarge,
    free_for,
    share_room,
)
from corral.scheduling.rooms import EPS, RANKED, ROUND_ROBIN, SHARES, Group, Request, RoomBook, WorkerRoom
from corral.scheduling.sequencing import Queue

__all__ = ["Assignment", "Placement", "Request", "RunningTask", "Unit", "WorkerRoom", "place", "place_over"]


@dataclass(frozen=True, slots=True)  # slots: one per pending task a pass (core.frozen.maker)
class Unit:
    key: TargetKey
    task_ids: tuple[int, ...]
    request: Request  # per task
    pool: str = DEFAULT_POOL
    constraints: tuple[AnyConstraint, ...] = ()
    spread: bool = False  # at most one of its tasks per worker
    priority: int = 0
    project: str = DEFAULT_PROJECT
    since: float = 0.0  # waiting since: past the pool's reservation time, room is held for it
    avoid: frozenset[str] = frozenset()  # workers its tasks failed on
    max_running: int | None = None  # at most this many of its job's tasks hold room at once

    @property
    def job_id(self) -> int:
        return self.key[0]


@dataclass(frozen=True, slots=True)  # slots: one per placed task (core.frozen.maker)
class Assignment:
    task_id: int
    worker_id: str
    gpu_ids: tuple[int, ...]


# An Assignment by position, made as a pass makes one for every task it places (a forecast some ten thousand): a
# maker's stores cost about two thirds of a dictionary built and set.
assigned = maker(Assignment)


@dataclass
class Placement:
    assignments: dict[TargetKey, list[Assignment]] = field(default_factory=dict)
    waiting: dict[TargetKey, Reason] = field(default_factory=dict)
    victims: dict[TargetKey, tuple[RunningTask, ...]] = field(default_factory=dict)  # evictions, per unit served
    # By position, the rooms the pass took its placements from, as it left them (its own copies; none it gave room
    # back to): an owner that starts every assignment keeps these rather than holding each task's room again.
    rooms: dict[int, WorkerRoom] = field(default_factory=dict)


def place(units: Sequence[Unit], rooms: Sequence[WorkerRoom], *, policy: Policy | None = None,
          running: Sequence[RunningTask] = (), now: float = 0.0,
          mixes: Mapping[str, RequestMix] | None = None) -> Placement:
    """Place units on the rooms given (mutating neither); `running` are the tasks holding room now.

    `mixes`: per pool, the requests it has seen lately, which the fragmentation-aware strategy
    places against; a pool without one is measured against its running and pending tasks.
    """
    return place_over(units, CapacityIndex(rooms, running), policy=policy, now=now, mixes=mixes)


def place_over(units: Sequence[Unit], index: CapacityIndex, *, policy: Policy | None = None, now: float = 0.0,
               mixes: Mapping[str, RequestMix] | None = None) -> Placement:
    """`place` over an index kept across passes (changing nothing in it): no pass walks every worker or task."""
    return _Pass(index, policy or Policy(), now, mixes or {}).run(units)


class _Alike(NamedTuple):
    """The kind (pool, constraints, request) of the task the last offer placed and the book's placing of that request
    in the group it chose from, by the pool's strategy: a task of this kind is placed by its next step and nothing
    else."""

    pool: str
    constraints: tuple[AnyConstraint, ...]
    request: Request
    steps: Iterator[tuple[int, list[int]] | None]


class _Pass:
    def __init__(self, index: CapacityIndex, policy: Policy, now: float, mixes: Mapping[str, RequestMix]) -> None:
        self.index = index
        self.book = RoomBook(index.rooms, kept=index)
        self.policy, self.running, self.now, self.mixes = policy, index.running.values(), now, mixes
        self.result = Placement()
        # Only projects with a quota are read, and charged as the pass places.
        self.quota_use: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float), {
            project: defaultdict(float, index.quota_use.get(project, {})) for project in policy.quotas})
        self.lowest_running = index.lowest_priorities()
        self.last_placed: dict[str, str] | None = None  # round-robin goes on from there, pass after pass
        self.blocked: dict[tuple, Reason] = {}  # one failed request of a kind settles its equals in this pass
        self.settled: dict[tuple, Reason] = {}  # blocked kinds whose equals wait for that reason whatever they check
        self.last_settled: tuple[tuple, Reason] | None = None  # the settled kind looked up last, and its reason
        self.ever_fits: dict[tuple, bool] = {}
        self.no_plan: set[tuple] = set()
        self.claimed: set[int] = set()  # stopping tasks a unit already counts on
        self.evicted_jobs: set[int] = set()
        self.reserved_for: dict[tuple, int] = {}  # one reservation per kind of unit: the first in order
        self.strategies: dict[str, Strategy] = {}
        self.placed_of: dict[int, int] = {}  # job -> its tasks placed in this pass (beside those the index holds)
        self.alike: _Alike | None = None  # the last offer's kind and where it chose, when it placed one task

    def run(self, units: Sequence[Unit]) -> Placement:
        by_pool: dict[str, list[Unit]] = defaultdict(list)
        for unit in units:
            by_pool[unit.pool].append(unit)
        for pool, pool_units in by_pool.items():
            pool_policy = self.policy.pool(pool)
            self.strategies[pool] = pool_policy.strategy or self._default_strategy(pool)
            if self.strategies[pool] is Strategy.FRAGMENTATION_AWARE:
                mix = self.mixes.get(pool)
                if mix is None or not mix.counts:  # none kept yet: the tasks in view stand in
                    mix = self._mix_seen(pool, pool_units)
                self.book.measures[pool] = self.index.fragmentation(pool, mix.weights())
            # 1. The pool's sequencer decides who is offered room first.
            queue = Queue(pool_units, pool_policy.sequencer, self.index.pool_use.get(pool, {}),
                          self.index.capacity(pool))
            while (unit := queue.next()) is not None:
                reason = self._offer(unit, pool_policy)
                if reason is None:
                    queue.charge(unit)
                    if self.alike is not None and queue.plain is not None:
                        self._place_run(queue.plain)
                else:
                    self.result.waiting[unit.key] = reason
                    if self.last_settled is not None and queue.plain is not None:
                        self._wait_run(queue.plain, pool_policy)
        self.result.rooms = self.book.taken()
        return self.result

    def _place_run(self, queued: deque[Unit]) -> None:
        """Place the units queued next that are alike the one just placed, each by choosing a worker alone (as
        `_offer` places one), up to the first that is not alike or finds no room, which `_offer` then takes through
        every check. Only where the order is fixed ahead (a placement changes no one's turn): a run of some thousand
        alike tasks is walked without the queue's and the checks' calls for each."""
        alike, assignments, placed_of, quotas = self.alike, self.result.assignments, self.placed_of, self.policy.quotas
        request, pool, constraints, step = alike.request, alike.pool, alike.constraints, alike.steps.__next__
        rooms, assignment = self.book.rooms, assigned
        while queued:
            unit = queued[0]
            if not ((unit.request is request or unit.request == request) and len(unit.task_ids) == 1
                    and not unit.avoid and unit.max_running is None and unit.pool == pool
                    and unit.constraints == constraints and unit.project not in quotas):
                return
            placed = step()
            if placed is None:
                return
            queued.popleft()
            assignments[unit.key] = [assignment(unit.task_ids[0], rooms[placed[0]].id, tuple(placed[1]))]
            job_id = unit.key[0]
            placed_of[job_id] = placed_of.get(job_id, 0) + 1

    def _wait_run(self, queued: deque[Unit], pool_policy: PoolPolicy) -> None:
        """The units queued next that are of the settled kind `_offer` looked up last wait for its reason, as `_offer`
        tells each (its lookup, first when nothing was placed since, checks only these), up to the first that is not:
        a queue that no longer finds room (some thousand tasks of a few kinds) is walked without the queue's and the
        offer's calls for each. Only where the order is fixed ahead, and just after an offer failed (so no alike
        placement is pending)."""
        if not self.settled or self.book.held or pool_policy.reservation_time is not None:
            return
        (pool, constraints, request, priority, spread), reason = self.last_settled  # not None: the caller checked
        quotas, waiting = self.policy.quotas, self.result.waiting
        while queued:
            unit = queued[0]
            if not ((unit.request is request or unit.request == request) and len(unit.task_ids) == 1
                    and not unit.avoid and unit.max_running is None and unit.project not in quotas
                    and unit.priority == priority and unit.spread == spread and unit.pool == pool
                    and unit.constraints == constraints):
                return
            queued.popleft()
            waiting[unit.key] = reason

    def _offer(self, unit: Unit, pool_policy: PoolPolicy) -> Reason | None:
        # A task alike the one placed by the offer just before passes every check that one passed (a kind is
        # blocked only by a failed offer, and nothing failed since): only the choice of worker is left.
        alike = self.alike
        if alike is not None and (unit.request is alike.request or unit.request == alike.request) \
                and unit.pool == alike.pool and unit.constraints == alike.constraints and self._checks_nothing(unit):
            placed = next(alike.steps)
            if placed is not None:
                self._placed(unit, [assigned(unit.task_ids[0], self.book.rooms[placed[0]].id, tuple(placed[1]))])
                return None
        self.alike = None
        if self.settled and not self.book.held and pool_policy.reservation_time is None and self._checks_nothing(unit):
            kind = (unit.pool, unit.constraints, unit.request, unit.priority, unit.spread)
            if self.last_settled is not None and self.last_settled[0] == kind:  # its equals come in a row: no hashing
                return self.last_settled[1]
            reason = self.settled.get(kind)
            if reason is not None:
                self.last_settled = (kind, reason)
                return reason
        # 2. The job's own cap, then quota.
        if unit.max_running is not None:
            holding = self.index.tasks_of_job.get(unit.job_id, 0) + self.placed_of.get(unit.job_id, 0)
            if holding + len(unit.task_ids) > unit.max_running:
                return AtMostRunning(holding, unit.max_running)
        over = self._over_quota(unit)
        if over is not None:
            return over
        # 3. Nobody present could hold it.
        group = self.book.group(unit.pool, unit.constraints, self._turns_after(unit.pool))
        absent = self._absent(unit, group)
        if absent is not None:
            return absent
        # 4. Whole, or not at all.
        kind = (unit.pool, unit.constraints, unit.request)
        single = len(unit.task_ids) == 1 and not unit.avoid
        if single and kind in self.blocked:
            reason = self._instead_of_waiting(unit, group, pool_policy, self.blocked[kind])
            if reason is self.blocked[kind] and self._settles(unit, pool_policy):
                self.settled[unit.pool, unit.constraints, unit.request, unit.priority, unit.spread] = reason
            return reason
        assignments, placeable = self._fit(unit, group)
        if assignments is not None:
            self._placed(unit, assignments)
            if self._checks_nothing(unit):
                self.alike = _Alike(unit.pool, unit.constraints, unit.request,
                                    self.book.placing(group, unit.request, self.strategies[unit.pool]))
            return None
        # 5. It waits; those behind it go on.
        reason = self._no_room(unit, group, placeable)
        if single:
            self.blocked[kind] = reason
        return self._instead_of_waiting(unit, group, pool_policy, reason)

    def _placed(self, unit: Unit, assignments: list[Assignment]) -> None:
        self.result.assignments[unit.key] = assignments
        job_id = unit.key[0]
        self.placed_of[job_id] = self.placed_of.get(job_id, 0) + len(unit.task_ids)
        if unit.project in self.policy.quotas:
            for resource, amount in unit.request.amounts(len(unit.task_ids)).items():
                self.quota_use[unit.project][resource] += amount

    def _checks_nothing(self, unit: Unit) -> bool:
        """Whether, once a unit of its kind was placed, placing this one is only choosing a worker: one task with
        nothing to avoid, no cap on its job, no quota on its project."""
        return (len(unit.task_ids) == 1 and not unit.avoid and unit.max_running is None
                and unit.project not in self.policy.quotas)

    def _settles(self, unit: Unit, pool_policy: PoolPolicy) -> bool:
        """Whether every unit alike this one (a blocked kind, the same priority and spread, nothing it checks) waits
        for the same reason for the rest of the pass while no room is held: nothing can be held for it, and it can
        preempt nothing (it does not outrank, or its kind found no plan; both stay so)."""
        return (not self.book.held and pool_policy.reservation_time is None and self._checks_nothing(unit)
                and (not self.policy.may_preempt(unit.pool)
                     or unit.priority <= self.lowest_running.get(unit.pool, unit.priority)
                     or (unit.pool, unit.constraints, unit.request, 1, unit.spread, unit.priority) in self.no_plan))

    def _instead_of_waiting(self, unit: Unit, group: Group, pool_policy: PoolPolicy, reason: Reason) -> Reason:
        # 5a. Room held for another would have fitted it.
        for i, holder in self.book.held.items():
            if holder != unit.job_id and i in group.member_set and self.book.rooms[i].fits(unit.request):
                return BehindReservation(holder)
        # 5b. Priority preemption.
        if self.policy.may_preempt(unit.pool) and unit.job_id not in self.evicted_jobs:
            made = self._preempt(unit, group)
            if made is not None:
                return made
        # 5c. Waited too long: hold room for it, unless one of its kind already has room held.
        if pool_policy.reservation_time is not None and self.now - unit.since >= pool_policy.reservation_time:
            kind = (unit.pool, unit.constraints, unit.request, len(unit.task_ids), unit.spread)
            if kind in self.reserved_for:
                return BehindReservation(self.reserved_for[kind])
            self.reserved_for[kind] = unit.job_id
            return self._reserve(unit, group, reason)
        return reason

    # 2 -------------------------------------------------------------------------------------

    def _over_quota(self, unit: Unit) -> OverQuota | None:
        limits = self.policy.quotas.get(unit.project)
        if not limits:
            return None
        asks = unit.request.amounts(len(unit.task_ids))
        used = self.quota_use[unit.project]
        for resource, limit in limits.items():
            ask = asks.get(resource, 0.0)
            if ask > 0 and used[resource] + ask > limit + EPS:
                return OverQuota(unit.project, resource, used[resource], limit, ask)
        return None

    # 3 -------------------------------------------------------------------------------------

    def _absent(self, unit: Unit, group: Group) -> Reason | None:
        rooms = self.book.rooms
        if not rooms:
            return NoWorkerAlive()
        if not group.members:
            in_pool = [room for room in rooms if room.pool == unit.pool]
            if not in_pool:
                return NoWorkerInPool(unit.pool)
            for implicit in (c for c in unit.constraints if isinstance(c, IMPLICIT)):
                if not any(implicit.admits(room) for room in in_pool):
                    return _none_admits(implicit, unit.pool)
            return NoWorkerMatches(unit.pool, unit.constraints)
        key = (id(group), unit.request)
        if key not in self.ever_fits:
            self.ever_fits[key] = any(rooms[i].could_ever_fit(unit.request) for i in group.members)
        if self.ever_fits[key]:
            return None
        request = unit.request
        need, gpu_memory = request.amounts(), request.gpu_memory
        for resource, amount in need.items():
            largest = rooms[_most(rooms, group.members, resource, request, free=False)]
            if amount > largest.capacity(resource, gpu_memory) + EPS:
                devices = largest.memories(range(largest.gpu)) if resource == "gpu" and gpu_memory else ()
                return TooLarge(unit.pool, need, resource, largest.capacity(resource, gpu_memory), largest.name,
                                gpu_memory, devices)
        return TooLarge(unit.pool, need, None, gpu_memory=gpu_memory)

    # 4 -------------------------------------------------------------------------------------

    def _fit(self, unit: Unit, group: Group) -> tuple[list[Assignment] | None, int]:
        book, request = self.book, unit.request
        avoid = {book.position[w] for w in unit.avoid if w in book.position}
        taken: list[tuple[int, int, list[int]]] = []
        used: set[int] = set()
        for task_id in unit.task_ids:
            exclude = used if unit.spread else ()
            strategy = self.strategies[unit.pool]
            placed = book.place(group, request, strategy, avoid.union(exclude)) if avoid else None
            if placed is None:
                placed = book.place(group, request, strategy, exclude)
            if placed is None:
                break
            i, gpu_ids = placed
            taken.append((task_id, i, gpu_ids))
            used.add(i)
        if len(taken) < len(unit.task_ids):
            for _, i, gpu_ids in taken:
                book.give(i, request, gpu_ids)
            return None, len(taken)
        return [assigned(task_id, book.rooms[i].id, tuple(gpu_ids)) for task_id, i, gpu_ids in taken], len(taken)

    # 5 -------------------------------------------------------------------------------------

    def _no_room(self, unit: Unit, group: Group, placeable: int) -> NoRoom:
        request, tasks = unit.request, len(unit.task_ids)
        need, gpu_memory = request.amounts(), request.gpu_memory
        wanted = [resource for resource, amount in need.items() if amount > 0]
        # A resource no worker has enough of for one task binds; for a gang, else its scarcest kind. The worker with
        # the most free is looked for only up to the binding resource: each costs a walk of the group.
        most_free: dict[str, WorkerRoom] = {}
        binding = None
        for r in wanted:
            most_free[r] = self._most_free(group, r, request)
            if need[r] > free_for(most_free[r], r, request) + EPS:
                binding = r
                break
        if binding is None and tasks > 1 and wanted:
            binding = wanted[0]
        if binding is None:
            return NoRoom(unit.pool, need, tasks, placeable, None, gpu_memory=gpu_memory)
        room = most_free[binding]
        free = free_for(room, binding, request)
        if binding == "gpu" and request.share:  # the most one device has free; with memory, what each has left
            shares = share_room(room) if gpu_memory else ()
            return NoRoom(unit.pool, need, tasks, placeable, binding, free, room.name if free or shares else "",
                          gpu_memory, shares=shares)
        shared = self.book.shared_devices(group) if binding == "gpu" else 0
        if binding == "gpu" and gpu_memory:  # name the free devices too small, if that is all there is
            devices = room.memories(room.free_gpu_ids)
            return NoRoom(unit.pool, need, tasks, placeable, binding, free, room.name if devices else "",
                          gpu_memory, devices, shared_devices=shared)
        return NoRoom(unit.pool, need, tasks, placeable, binding, free, room.name if free > EPS else "", gpu_memory,
                      shared_devices=shared)

    def _most_free(self, group: Group, resource: str, request: Request) -> WorkerRoom:
        """The member with the most of a resource free now, as this request sees it."""
        if resource in RANKED and not request.gpu_memory and not (resource == "gpu" and request.share):
            return self.book.rooms[self.book.most_free(group, resource)]
        return self.book.rooms[_most(self.book.rooms, group.members, resource, request, free=True)]

    def _preempt(self, unit: Unit, group: Group) -> Reason | None:
        if unit.priority <= self.lowest_running.get(unit.pool, unit.priority):
            return None  # nothing running here ranks below it
        kind = (unit.pool, unit.constraints, unit.request, len(unit.task_ids), unit.spread, unit.priority)
        if kind in self.no_plan:
            return None
        rooms = [self.book.rooms[i].copy() for i in group.members if i not in self.book.held]
        ids = {room.id for room in rooms}
        by_id = {room.id: room for room in rooms}
        stopping = [t for t in self.running if t.stopping and t.worker_id in ids and t.task_id not in self.claimed]
        for task in stopping:  # their room is on its way back
            by_id[task.worker_id].give(task.request, task.gpu_ids)
        if stopping and choose_victims(unit.request, len(unit.task_ids), unit.priority, rooms, (),
                                       spread=unit.spread) is not None:
            self.claimed.update(t.task_id for t in stopping)
            self._hold_workers({t.worker_id for t in stopping}, unit.job_id)
            return AwaitingPreempted(len(stopping))
        candidates = [t for t in self.running if not t.stopping and t.priority < unit.priority
                      and t.job_id not in self.evicted_jobs and (t.gang or t.worker_id in ids)]
        if not candidates:
            self.no_plan.add(kind)
            return None
        plan = self._move(unit, group, rooms, candidates)
        moved = plan is not None
        if plan is None:
            plan = choose_victims(unit.request, len(unit.task_ids), unit.priority, rooms, candidates,
                                  spread=unit.spread)
        if plan is None:
            self.no_plan.add(kind)
            return None
        self.result.victims[unit.key] = plan.victims
        self.evicted_jobs.update(t.job_id for t in plan.victims)
        self.claimed.update(t.task_id for t in stopping)
        self._hold_workers({worker for _, worker in plan.placements}, unit.job_id)
        jobs = tuple(sorted({t.job_id for t in plan.victims}))
        return Moving(len(plan.victims), jobs) if moved else Preempting(len(plan.victims), jobs)

    def _move(self, unit: Unit, group: Group, rooms: list[WorkerRoom],
              candidates: list[RunningTask]) -> VictimPlan | None:
        """Defragmentation: a gang that the pool's free room would hold in total, but no arrangement of it on the
        devices as they are, moves lower-priority single tasks that then fit elsewhere in the pool."""
        if len(unit.task_ids) < 2 or not self._free_in_total(unit, rooms):
            return None
        elsewhere = [room for i, room in enumerate(self.book.rooms)
                     if room.pool == unit.pool and i not in group.member_set and i not in self.book.held]
        return choose_victims(unit.request, len(unit.task_ids), unit.priority, rooms, candidates,
                              spread=unit.spread, move_to=elsewhere)

    @staticmethod
    def _free_in_total(unit: Unit, rooms: Sequence[WorkerRoom]) -> bool:
        """Whether the free room of these workers, summed, holds the whole unit: a device's free hundredths count
        as GPU (only devices with the memory asked count)."""
        request = unit.request
        for resource, amount in request.amounts(len(unit.task_ids)).items():
            free = sum(_free_gpus(room, request.gpu_memory) if resource == "gpu" else room.free(resource)
                       for room in rooms)
            if amount > free + EPS:
                return False
        return True

    def _reserve(self, unit: Unit, group: Group, reason: Reason) -> Reason:
        rooms, request = self.book.rooms, unit.request
        binding = getattr(reason, "resource", None) or "cpu"
        closest = sorted((i for i in group.members if i not in self.book.held and rooms[i].could_ever_fit(request)),
                         key=lambda i: -free_for(rooms[i], binding, request))
        held: list[int] = []
        remaining = len(unit.task_ids)
        for i in closest:
            held.append(i)
            remaining -= 1 if unit.spread else _tasks_held_when_empty(rooms[i], request)
            if remaining <= 0:
                break
        for i in held:
            self.book.hold(i, unit.job_id)
        return Reserved(reason, tuple(rooms[i].name for i in held))

    # helpers -------------------------------------------------------------------------------

    def _hold_workers(self, worker_ids: set[str], job_id: int) -> None:
        for worker_id in worker_ids:
            self.book.hold(self.book.position[worker_id], job_id)

    def _turns_after(self, pool: str) -> str | None:
        """The worker a round-robin pool's turns go on after; asked of the index only where turns are taken (finding
        it may walk every running task)."""
        if self.strategies[pool] is not ROUND_ROBIN:
            return None
        if self.last_placed is None:
            self.last_placed = self.index.last_placed()
        return self.last_placed.get(pool)

    def _default_strategy(self, pool: str) -> Strategy:
        """Fragmentation-aware where the pool has GPUs (it leaves fewer of them unused), concentrated elsewhere."""
        has_gpus = self.index.capacity(pool).get("gpu", 0) > 0
        return Strategy.FRAGMENTATION_AWARE if has_gpus else Strategy.CONCENTRATED

    def _mix_seen(self, pool: str, units: Sequence[Unit]) -> RequestMix:
        """The requests of the pool's running tasks and pending units: the mix when none was kept."""
        pools = {room.id: room.pool for room in self.book.rooms}
        mix = RequestMix()
        for task in self.running:
            if pools.get(task.worker_id) == pool:
                mix.add(task.request)
        for unit in units:
            mix.add(unit.request, unit.constraints, len(unit.task_ids))
        return mix

def _free_gpus(room: WorkerRoom, gpu_memory: int) -> float:
    """Unused devices, and the free hundredths of shared ones, with at least `gpu_memory` bytes."""
    shared = sum(SHARES - used for d, used in room.gpu_shared.items() if room.device_memory(d) >= gpu_memory)
    return len(room.gpus_with(gpu_memory, room.free_gpu_ids)) + shared / SHARES


def _tasks_held_when_empty(room: WorkerRoom, request: Request) -> int:
    """How many tasks of this size the worker holds when nothing else runs there (at least 1)."""
    counts = [_held_when_empty(room, r, amount, request) for r, amount in request.amounts().items() if amount > 0]
    return max(1, int(min(counts, default=1)))


def _held_when_empty(room: WorkerRoom, resource: str, amount: float, request: Request) -> float:
    """How many tasks one resource of an empty worker holds: shares count per device, by hundredths and by the
    device memory each reserves."""
    if resource != "gpu" or not request.share:
        return room.capacity(resource, request.gpu_memory) // amount
    return sum(min(SHARES // request.share, room.device_memory(d) // request.gpu_memory if request.gpu_memory
                   else SHARES) for d in range(room.gpu))


def _most(rooms: Sequence[WorkerRoom], members: Sequence[int], resource: str, request: Request, *,
          free: bool) -> int:
    """The member with the most of a resource, free now or in all (for a share free now: the most of one device);
    for GPUs with a memory rule, the most devices that satisfy it, then the biggest device (the one a reason names);
    for a share that no device has the memory left for, the most share room (the reason lists what is left)."""
    gpu_memory = request.gpu_memory
    if free and resource == "gpu" and request.share and not gpu_memory:
        # A device nothing uses is the most one can have free: the first member with one is the answer, found without
        # working out every member's shares (a thousand workers, for each share that waits).
        unused = next((i for i in members if rooms[i].free_gpu_ids), None)
        if unused is not None:
            return unused

    def amount(i: int) -> tuple[float, float]:
        room = rooms[i]
        most = free_for(room, resource, request) if free else room.capacity(resource, gpu_memory)
        if resource != "gpu" or not gpu_memory:
            return most, 0
        if free and request.share:
            return most, room.free_share()
        return most, max(room.memories(room.free_gpu_ids if free else range(room.gpu)), default=-1)
    return max(members, key=amount)


def _none_admits(implicit: PythonConstraint | SharedDirectory, pool: str) -> Reason:
    """The pending reason of a job whose implicit constraint no worker of its pool meets now."""
    if isinstance(implicit, PythonConstraint):
        return NoWorkerHasPython(pool, implicit.version)
    return NoWorkerShares(pool, implicit.path)
