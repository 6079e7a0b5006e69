"""When each pending job starts: the scheduler run ahead over the queue and the running tasks' expected ends.

Pure, over what a scheduling pass reads. The simulation moves time from event to event (a running
task's expected end, a begin time) and at each runs the real placement (`place_over`: the pools'
sequencers, quotas, reservations and preemption as configured) over a capacity index of its own;
what it places runs for its expected duration, then frees its room; a job that ends is taken to
have SUCCEEDED for those that wait on it; an evicted task waits again. A job's estimate is the
moment its first pending unit is placed; where that room was freed by one job's end, that job is
named.

What keeps it cheap enough to run every few seconds over 10k pending units and 1k workers:
  - steps land on events, but at most one step per tenth of the time ahead (RESOLUTION), so a
    day ahead is some hundred passes, and the error this adds is under a tenth of the wait;
  - a pass is offered, of each kind of unit, only as many as the pool's free room could hold in
    total (the rest could not be placed anyway, and a unit that fails to fit changes nothing a
    later one sees), besides the units that would preempt or hold a reservation;
  - the rest is the cost per task placed and ended, some 10k of each (placement's choice and
    take, the index's counts, the next settle's restating of its room), kept low by look-ups
    that do not hash what they can number or find by identity (kinds are numbered; alike tasks
    in a row choose with one request object), by tasks made without the dataclass constructor
    (`_start` fills their dictionaries itself), and by the garbage collector being off while the simulation runs: its
    full collections walked every object the caller holds, and the simulation leaves no
    cycles behind.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from operator import itemgetter

from corral.core.collector import paused
from corral.core.config import Sequencer, Strategy
from corral.scheduling.capacity import CapacityIndex
from corral.scheduling.fragmentation import RequestMix
from corral.scheduling.placement import Placement, Unit, place_over
from corral.scheduling.policy import Policy
from corral.scheduling.preemption import RunningTask
from corral.scheduling.reasons import (
    DependencyFailed,
    NoWorkerAlive,
    NoWorkerHasPython,
    NoWorkerInPool,
    NoWorkerMatches,
    NoWorkerShares,
    Reason,
    TooLarge,
)
from corral.scheduling.rooms import EPS, WorkerRoom
from corral.scheduling.snapshot import JobEnd, JobPlacement, gate

HORIZON = 7 * 86400.0  # seconds ahead past which a start is "unknown"
RESOLUTION = 0.1  # a step waits for events at most this share of the time ahead
MIN_STEP = 1.0  # seconds: no two steps closer than this
# Reasons that no amount of waiting changes: nothing present could ever hold the unit.
NEVER = (NoWorkerAlive, NoWorkerInPool, NoWorkerMatches, NoWorkerShares, NoWorkerHasPython, TooLarge,
         DependencyFailed)


@dataclass(frozen=True)
class Waiting:
    """A pending unit, with how long each of its tasks runs once placed, and its job's gates."""

    unit: Unit
    runs_for: float
    job: JobPlacement = field(default_factory=JobPlacement)


@dataclass(frozen=True)
class Ending:
    """A task holding room now, and when it is expected to end."""

    task: RunningTask
    ends_at: float


@dataclass(frozen=True)
class Estimate:
    job_id: int
    start_at: float | None  # when its first pending unit is placed; None: not within the horizon, or never
    after_job: int | None = None  # the job whose end frees its room, or which it waited for
    all_started_at: float | None = None  # when its last pending unit is placed
    reason: Reason | None = None  # with no start: the placement's reason at the end of the simulation
    never: bool = False  # with no start: nothing present could ever hold it


@dataclass(frozen=True)
class Situation:
    """Everything a forecast runs over, as one value: a what-if changes one part of it and runs it again."""

    waiting: tuple[Waiting, ...]
    rooms: tuple[WorkerRoom, ...]
    ending: tuple[Ending, ...]
    now: float
    policy: Policy = field(default_factory=Policy)
    dependencies: Mapping[int, JobEnd] = field(default_factory=dict)

    def forecast(self, *, horizon: float = HORIZON, watch: int | None = None) -> dict[int, Estimate]:
        return forecast(self.waiting, self.rooms, self.ending, now=self.now, policy=self.policy,
                        dependencies=self.dependencies, horizon=horizon, watch=watch)


def forecast(waiting: Sequence[Waiting], rooms: Sequence[WorkerRoom], ending: Sequence[Ending], *, now: float,
             policy: Policy | None = None, dependencies: Mapping[int, JobEnd] | None = None,
             horizon: float = HORIZON, watch: int | None = None) -> dict[int, Estimate]:
    """An estimate for every job with a unit in `waiting`. `rooms` are the alive workers net of `ending`;
    `dependencies` the jobs named in after/after_any as they are now.
    With `watch`, the simulation stops once that job's first unit is placed: only its estimate is sure."""
    with paused():  # the simulation makes some hundred thousand short-lived objects, and no garbage cycles to speak of
        return _Simulation(waiting, rooms, ending, now, policy or Policy(), dependencies or {}, horizon).run(watch)


class _Simulation:
    def __init__(self, waiting: Sequence[Waiting], rooms: Sequence[WorkerRoom], ending: Sequence[Ending],
                 now: float, policy: Policy, dependencies: Mapping[int, JobEnd], horizon: float) -> None:
        self.now, self.policy, self.until = now, policy, now + horizon
        self.pool_of = {room.id: room.pool for room in rooms}
        # The index keeps only what the simulation reads: its workers never change, caps and turns may be asked of none.
        self.index = CapacityIndex(
            rooms, [e.task for e in ending], quotas=frozenset(policy.quotas),
            capped=frozenset(item.unit.job_id for item in waiting if item.unit.max_running is not None),
            workers_change=False,
            turns=any(policy.pool(pool).strategy is Strategy.ROUND_ROBIN for pool in set(self.pool_of.values())))
        self.ends = _Ends()  # (end, task id) of every task holding room, the entries in `stale` left out
        # The ends of the tasks running at the start; those placed in the simulation end at since + runs_for. An
        # evicted task's entry stays in the heap, named in `stale`: a task placed again ends later than before.
        self.ends_at: dict[int, float] = {}
        self.runs_for: dict[int, float] = {}
        self.stale: set[tuple[float, int]] = set()
        self.left: Counter[int] = Counter()  # tasks of a named job not ended in the simulation (`_count_left`)
        ends_at = self.ends_at
        for e in ending:
            ends_at[e.task.task_id] = e.ends_at
        self.ends.add([(e.ends_at, e.task.task_id) for e in ending])
        self.dependencies = dict(dependencies)
        self.order: dict = {}  # unit key -> its place in the sequencers' order
        self.next_place = len(waiting)  # an evicted unit's place: after every other, even one placed and evicted before
        self.kinds: dict[int, dict] = defaultdict(dict)  # kind -> {unit key: Waiting}, in order
        self.gated: dict = {}  # unit key -> Waiting, held back by its job's dependencies or begin time
        self.asked: set[int] = set()  # the jobs to estimate (not evicted ones waiting again)
        self.named: set[int] = set()  # jobs waited on
        # Kinds are numbered: a number is looked up without hashing the request and constraints it stands for.
        self.kind_ids: dict[tuple, int] = {}
        self.kind_facts: list[tuple] = []  # per kind: (pool, constraints, request, tasks, spread, project, priority)
        self.kind_of: dict = {}  # unit key -> its kind
        self.irregular: set[int] = set()  # kinds with a unit that avoids workers or whose job has a cap
        fifo = {pool: self.policy.pool(pool).sequencer is Sequencer.FIFO for pool in {i.unit.pool for i in waiting}}
        # Priority first where the pool's sequencer orders by it (fair share does within a project), then as given:
        # the same order the pass's Queue makes, so that the few units offered of a kind are the ones it would.
        order, gated, asked, kind_of = self.order, self.gated, self.asked, self.kind_of
        holding = ends_at.keys()
        last: Unit | None = None  # the unit before, and its kind
        kind = -1
        for n, item in enumerate(sorted(waiting, key=lambda item: 0 if fifo[item.unit.pool] else -item.unit.priority)):
            unit = item.unit
            if not holding.isdisjoint(unit.task_ids):
                # Read pending, and holding room: the caller's reads a moment apart (on PostgreSQL each statement
                # sees what was committed before it, so a placement committed between the pending rows' read and the
                # kept index's) show the task both ways. Placed again it would hold its room twice and end twice;
                # it holds its room, and its unit is left to a pass whose reads agree.
                continue
            key = unit.key
            order[key] = n
            gated[key] = item
            asked.add(key[0])
            if item.job.after or item.job.after_any:
                self.named.update(item.job.after, item.job.after_any)
            request = unit.request
            if last is not None and (request is last.request or request._fields == last.request._fields) and \
                    unit.constraints == last.constraints and unit.priority == last.priority and \
                    len(unit.task_ids) == len(last.task_ids) and unit.pool == last.pool and \
                    unit.project == last.project and unit.spread == last.spread:
                # alike the unit before (a job's tasks come in a row): its kind, with no request hashed or compared
                # through the request's Python `__hash__` and `__eq__`
                if unit.avoid or unit.max_running is not None:
                    self.irregular.add(kind)
            else:
                kind = self._kind(unit)
            kind_of[key] = kind
            last = unit
        if self.named:
            self._count_left(ending)
        self.mixes = self._mixes_seen(waiting, ending)
        # worker -> (the latest end, the jobs whose tasks ended) of the tasks that ended there this step
        self.freed: dict[str, list] = {}
        # job -> [its first start, the job it waited for then, its latest start]: a step's placements start in
        # the order they are made, none before the step before's, so a job's starts never go back
        self.starts: dict[int, list] = {}
        self.reasons: dict = {}
        self.doomed: dict[int, Reason] = {}  # job -> why it never starts (a dependency ended as it did not ask)
        self.latest_start = now  # placements of one step start in the order they are made
        self.evicted = False  # in this step

    def _count_left(self, ending: Sequence[Ending]) -> None:
        """The tasks of each job others wait on, running or queued: when the last ends, the job has ended. Only these
        are read, so no other job's are counted."""
        named, left = self.named, self.left
        for e in ending:
            if e.task.job_id in named:
                left[e.task.job_id] += 1
        for (job_id, _), item in self.gated.items():
            if job_id in named:
                left[job_id] += len(item.unit.task_ids)

    def _kind(self, unit: Unit) -> int:
        """Units alike for placement: offered together, and counted against the free room together."""
        kind = (unit.pool, unit.constraints, unit.request, len(unit.task_ids), unit.spread, unit.project,
                unit.priority)
        number = self.kind_ids.get(kind)
        if number is None:
            number = self.kind_ids[kind] = len(self.kind_facts)
            self.kind_facts.append(kind)
        if unit.avoid or unit.max_running is not None:
            self.irregular.add(number)
        return number

    def run(self, watch: int | None) -> dict[int, Estimate]:
        t, previous = self.now, self.now
        while (self.kinds or self.gated) and watch not in self.starts:
            self._release(t)
            self._ungate(t)
            units, held_back = self._offered(t)
            if units:
                placement = self._place(units, held_back, t)
                self._start(placement, t, previous)
                for victims in placement.victims.values():
                    self._evict(victims, t)
            following = self._next_step(t)
            if following is None or following > self.until:
                break
            previous, t = t, following
        return self._estimates(t)

    # A step -------------------------------------------------------------------------------------

    def _release(self, t: float) -> None:
        """Tasks expected to end by `t` free their room; a job with nothing left has ended, successfully."""
        self.freed.clear()
        running, left, freed, stale = self.index.running, self.left, self.freed, self.stale
        ended: list[RunningTask] = []
        named, dependencies = self.named, self.dependencies
        for end, task_id in self.ends.due(t):
            if stale and (end, task_id) in stale:  # evicted before it ended
                stale.discard((end, task_id))
                continue
            task = running[task_id]
            ended.append(task)
            job_id = task.job_id
            on_worker = freed.get(task.worker_id)
            if on_worker is None:
                freed[task.worker_id] = [end, {job_id}]
            else:  # ends come in order: this one is the latest
                on_worker[0] = end
                on_worker[1].add(job_id)
            if job_id in named:
                tasks_left = left[job_id] - 1
                left[job_id] = tasks_left
                if tasks_left <= 0:
                    dependencies[job_id] = JobEnd("SUCCEEDED", end)
        self.index.remove_tasks(ended)

    def _ungate(self, t: float) -> None:
        """Units whose dependencies ended as asked and whose begin time passed join their kinds."""
        if not self.gated:
            return
        still: dict = {}
        kinds, kind_of = self.kinds, self.kind_of
        for key, item in self.gated.items():
            job = item.job
            if not job.gated:  # `gate` would answer None at once
                kinds[kind_of[key]][key] = item
                continue
            held_back = gate(job, self.dependencies, t)
            if held_back is None:
                kinds[kind_of[key]][key] = item
            elif isinstance(held_back, DependencyFailed):
                self.doomed[item.unit.job_id] = held_back
            else:
                still[key] = item
        self.gated = still

    def _offered(self, t: float) -> tuple[list[Unit], list[tuple[list[Unit], list]]]:
        """Of each kind, the first units the pool's free room could hold in all, and those that would preempt or
        reserve; in the sequencers' order. Where units wait alone (`_waiting_alone`), of those asking one request
        on one group of workers only one more than that room could hold are offered: past the first of them that
        waits, the pass places none, and each waits for the same reason. Those held back are returned beside, per
        request and group: (the units offered, in the pass's order; the keys of those held back)."""
        free = {pool: self._free(pool) for pool in {self.kind_facts[kind][0] for kind in self.kinds}}
        lowest = self.index.lowest_priorities()
        alone = self._waiting_alone(lowest)
        offered: list[tuple[int, Unit]] = []  # (place in order, unit)
        # (pool, constraints, request) -> its kinds: (-priority under the priority sequencer, kind, units offered)
        alike: dict[tuple, list[tuple[int, int, int]]] = defaultdict(list)
        most: dict[tuple, int] = {}  # (pool, constraints, request) -> the most units of it offered
        order, quotas = self.order, self.policy.quotas
        for kind, items in self.kinds.items():
            pool, constraints, request, tasks, _, project, priority = self.kind_facts[kind]
            pool_policy = self.policy.pool(pool)
            need = request.amounts(tasks)
            room = free[pool]
            if self.policy.may_preempt(pool) and priority > lowest.get(pool, priority):
                room = self.index.capacity(pool)  # it may evict: what the pool holds in all bounds it
            count = min((math.floor((room.get(r, 0.0) + EPS) / amount) for r, amount in need.items() if amount > 0),
                        default=len(items))
            if pool_policy.reservation_time is not None:
                count = max(count, 1)  # the first may be owed room held for it
            if pool in alone and tasks == 1 and project not in quotas and kind not in self.irregular:
                alike[pool, constraints, request].append(
                    (-priority if pool_policy.sequencer is Sequencer.PRIORITY else 0, kind, count))
                most[pool, constraints, request] = count + 1
            else:
                offered += [(order[key], item.unit) for key, item in islice(items.items(), count)]
        held_back: list[tuple[list[Unit], list]] = []
        for same, kinds in alike.items():
            first, rest = self._first_of(kinds, most[same])
            offered += [(order[unit.key], unit) for unit in first]
            if rest:
                held_back.append((first, rest))
        offered.sort(key=itemgetter(0))
        return [unit for _, unit in offered], held_back

    def _first_of(self, kinds: list[tuple[int, int, int]], most: int) -> tuple[list[Unit], list]:
        """Of the units these kinds (rank, kind, units offered) offer, the first `most` as the pass takes them (by
        rank, then in order), and the keys of the rest. With one kind per rank, kind after kind, no unit compared."""
        if len({rank for rank, _, _ in kinds}) < len(kinds):
            units = sorted(((rank, self.order[key]), key, item.unit) for rank, kind, count in kinds
                           for key, item in islice(self.kinds[kind].items(), count))
            return [unit for _, _, unit in units[:most]], [key for _, key, _ in units[most:]]
        first: list[Unit] = []
        rest: list = []
        for _, kind, count in sorted(kinds):
            items = self.kinds[kind]
            taken = min(count, most - len(first))
            first += [item.unit for item in islice(items.values(), taken)]
            rest += islice(items, taken, count)
        return first, rest

    def _waiting_alone(self, lowest: Mapping[str, int]) -> set[str]:
        """The pools where a unit of one task (nothing to avoid, no cap on its job, no quota on its project) offered
        after one of its request and group that waited also waits, for that one's reason, and changes nothing the
        pass does: units are taken in order (priority or FIFO), and no room is ever held there (no reservations, no
        waiting unit that outranks what runs there)."""
        highest: dict[str, int] = {}
        for kind in self.kinds:
            pool, priority = self.kind_facts[kind][0], self.kind_facts[kind][6]
            highest[pool] = max(priority, highest.get(pool, priority))
        alone = set()
        for pool, priority in highest.items():
            pool_policy = self.policy.pool(pool)
            if pool_policy.sequencer is not Sequencer.FAIR_SHARE and pool_policy.reservation_time is None and not (
                    self.policy.may_preempt(pool) and priority > lowest.get(pool, priority)):
                alone.add(pool)
        return alone

    def _place(self, units: list[Unit], held_back: list[tuple[list[Unit], list]], t: float) -> Placement:
        """The pass over the units offered; those held back wait for the reason of the first of their request and
        group that waited. Should none of those offered have waited, the pass runs again with all of them."""
        placement = place_over(units, self.index, policy=self.policy, now=t, mixes=self.mixes)
        waiting = placement.waiting
        reasons = []
        for offered, rest in held_back:
            reason = next((waiting[unit.key] for unit in offered if unit.key in waiting), None)
            if reason is None:  # room enough for all offered, within rounding: the pass as it would be without this
                units = sorted([*units, *(self.kinds[self.kind_of[key]][key].unit for _, keys in held_back
                                          for key in keys)], key=lambda unit: self.order[unit.key])
                placement = place_over(units, self.index, policy=self.policy, now=t, mixes=self.mixes)
                self.reasons.update(placement.waiting)
                return placement
            reasons.append((reason, rest))
        self.reasons.update(waiting)
        for reason, rest in reasons:
            self.reasons.update(dict.fromkeys(rest, reason))
        return placement

    def _free(self, pool: str) -> dict[str, float]:
        """What the pool's alive workers have free in all, per resource."""
        free = dict(self.index.capacity(pool))
        for use in self.index.pool_use.get(pool, {}).values():
            for resource, amount in use.items():
                free[resource] = free.get(resource, 0.0) - amount
        return free

    def _unqueue(self, key) -> tuple[int, Waiting]:
        """A unit out of the queue: its kind, and it."""
        kind = self.kind_of.pop(key)
        item = self.kinds[kind].pop(key)
        if not self.kinds[kind]:
            del self.kinds[kind]
        return kind, item

    def _start(self, placement: Placement, t: float, previous: float) -> None:
        """The units a pass placed start, in the order it placed them: each runs for its expected duration. Their
        tasks hold the request of their kind, one object for all alike (equal to each unit's own): the index sums
        alike tasks' use as one, and a request found by identity is not compared field by field. The index keeps the
        rooms the pass took them from, as the pass left them: each task's room is taken once, not held again."""
        placed = placement.assignments
        freed, starts, runs_for, facts = self.freed, self.starts, self.runs_for, self.kind_facts
        kinds, kind_of = self.kinds, self.kind_of
        new, set_dict = object.__new__, object.__setattr__
        tasks: list[RunningTask] = []
        ends: list[tuple[float, int]] = []
        for key, assignments in placed.items():
            kind = kind_of.pop(key)  # out of the queue (`_unqueue`, unrolled)
            items = kinds[kind]
            item = items.pop(key)
            if not items:
                del kinds[kind]
            request = facts[kind][2]
            unit, job = item.unit, item.job
            named = job.after or job.after_any
            if not freed:
                ended = None
            elif len(assignments) == 1:
                ended = freed.get(assignments[0].worker_id)
            else:
                on_workers = [freed[a.worker_id] for a in assignments if a.worker_id in freed]
                ended = [max(latest for latest, _ in on_workers), set().union(*(jobs for _, jobs in on_workers))] \
                    if on_workers else None
            if ended is not None:
                latest, jobs = ended
                start = max(latest, previous, self.latest_start)
                after = next(iter(jobs)) if len(jobs) == 1 else self._waited_for(job) if named else None
            else:
                start, after = t, self._waited_for(job) if named else None
            self.latest_start = start
            job_id, task_key = key
            started = starts.get(job_id)
            if started is None:
                starts[job_id] = [start, after, start]
            else:
                started[2] = start
            gang = task_key is None
            lasts = item.runs_for
            end = t + lasts
            priority, project = unit.priority, unit.project
            for a in assignments:
                task_id = a.task_id
                task = new(RunningTask)  # not the constructor: its keywords and frozen sets cost more per task
                set_dict(task, "__dict__", {"task_id": task_id, "job_id": job_id, "worker_id": a.worker_id,
                                            "request": request, "gpu_ids": a.gpu_ids, "priority": priority,
                                            "project": project, "since": t, "gang": gang, "stopping": False})
                tasks.append(task)
                runs_for[task_id] = lasts
                ends.append((end, task_id))
        self.index.add_placed(tasks, placement.rooms)
        self.ends.add(ends)

    def _waited_for(self, job: JobPlacement) -> int | None:
        """Of the jobs it named, the one that ended last in the simulation."""
        ended = [(self.dependencies[j].finished_at or 0.0, j) for j in (*job.after, *job.after_any)
                 if j in self.dependencies and self.dependencies[j].state == "SUCCEEDED"]
        return max(ended)[1] if ended else None

    def _evict(self, victims: Sequence[RunningTask], t: float) -> None:
        """Evicted tasks free their room at once and wait again: a gang whole, a task alone."""
        self.evicted = True
        by_key: dict[tuple, dict[int, RunningTask]] = defaultdict(dict)
        for task in victims:
            by_key[(task.job_id, None) if task.gang else (task.job_id, task.task_id)][task.task_id] = task
        for key, tasks in by_key.items():
            first = next(iter(tasks.values()))
            runs_for = self.runs_for.get(first.task_id)
            if runs_for is None:  # running at the start
                runs_for = max(self.ends_at[first.task_id] - first.since, MIN_STEP)
            for task_id, task in tasks.items():
                self.index.remove(task_id)
                end = self.ends_at.pop(task_id, None)
                if end is None and task_id in self.runs_for:
                    end = task.since + self.runs_for[task_id]  # as `_start` summed it
                if end is not None:
                    self.stale.add((end, task_id))
            pool = self.pool_of.get(first.worker_id)
            if pool is None:
                continue
            task_ids = tuple(tasks)
            if key in self.kind_of:  # a gang evicted in two steps (rows that disagree on it): it waits as one
                earlier = self._unqueue(key)[1]
                task_ids = tuple(dict.fromkeys(earlier.unit.task_ids + task_ids))
            unit = Unit(key, task_ids, first.request, pool=pool, priority=first.priority, project=first.project,
                        since=t)
            self.order[key] = self.next_place
            self.next_place += 1
            self.kind_of[key] = self._kind(unit)
            self.kinds[self.kind_of[key]][key] = Waiting(unit, runs_for)

    def _next_step(self, t: float) -> float | None:
        """The next moment something may change: an expected end or a begin time, at least a step away."""
        first = self.ends.first()
        events = [] if first is None else [first]
        if self.evicted:  # their room is free from the next step
            events.append(t)
            self.evicted = False
        events += [item.job.begin for item in self.gated.values() if item.job.begin is not None and item.job.begin > t]
        if not events:
            return None
        return max(min(events), t + max(MIN_STEP, (t - self.now) * RESOLUTION))

    # The answer ---------------------------------------------------------------------------------

    def _estimates(self, t: float) -> dict[int, Estimate]:
        unplaced: dict[int, Reason | None] = dict(self.doomed)
        last = {kind: next(iter(items.values())).unit for kind, items in self.kinds.items() if items}
        if last:  # why the first of each kind still waits, as the pass at the last moment sees it
            self.reasons.update(place_over(list(last.values()), self.index, policy=self.policy, now=t,
                                           mixes=self.mixes).waiting)
        for kind, items in self.kinds.items():
            reason = self.reasons.get(last[kind].key) if kind in last else None
            for key, item in items.items():
                unplaced.setdefault(item.unit.job_id, self.reasons.get(key, reason))
        for key, item in self.gated.items():
            unplaced.setdefault(item.unit.job_id, self.reasons.get(key))
        estimates: dict[int, Estimate] = {}
        for job_id, (start, after, latest) in self.starts.items():
            if job_id in self.asked:
                estimates[job_id] = Estimate(job_id, start, after, None if job_id in unplaced else latest)
        for job_id, reason in unplaced.items():
            if job_id not in estimates and job_id in self.asked:
                estimates[job_id] = Estimate(job_id, None, reason=reason, never=isinstance(reason, NEVER))
        return estimates

    def _mixes_seen(self, waiting: Sequence[Waiting], ending: Sequence[Ending]) -> dict[str, RequestMix]:
        """The pools' request mixes from the tasks in view, fixed for the whole simulation (a mix that changed
        step by step would rebuild the fragmentation measure at every step). Alike tasks and units in a row (a job's,
        read together) are handed over as one run: its requests compared by their fields, as `add_all` compares."""
        seen: dict[str, list[tuple]] = defaultdict(list)  # per pool, (request, constraints, times, repeats) in order
        pool_of = self.pool_of
        last_pool, last_request, last_fields, repeats = None, None, (), 0  # the run so far, of the running tasks
        for e in ending:
            task = e.task
            pool = pool_of.get(task.worker_id)
            if pool is None:
                continue
            request = task.request
            if pool == last_pool and (request is last_request or request._fields == last_fields):
                repeats += 1
                continue
            if repeats:
                seen[last_pool].append((last_request, (), 1, repeats))
            last_pool, last_request, last_fields, repeats = pool, request, request._fields, 1
        if repeats:
            seen[last_pool].append((last_request, (), 1, repeats))
        last: Unit | None = None  # the run so far, of the pending units: its first, and how many
        repeats = 0
        for item in waiting:
            unit = item.unit
            request = unit.request
            if last is not None and (request is last.request or request._fields == last.request._fields) and \
                    unit.pool == last.pool and unit.constraints == last.constraints and \
                    len(unit.task_ids) == len(last.task_ids):
                repeats += 1
                continue
            if last is not None:
                seen[last.pool].append((last.request, last.constraints, len(last.task_ids), repeats))
            last, repeats = unit, 1
        if last is not None:
            seen[last.pool].append((last.request, last.constraints, len(last.task_ids), repeats))
        mixes: dict[str, RequestMix] = defaultdict(RequestMix)
        for pool, runs in seen.items():
            mixes[pool].add_all(runs)
        return mixes


class _Ends:
    """The expected ends of the tasks holding room, as (end, task id), given out in order once due. Kept as sorted
    runs, one per batch added (the tasks running at the start; each step's placements), rather than one heap: a
    step takes each run's due entries by bisection and sorts them together (the runs merge as they are, in C), where
    a heap of ten thousand entries paid some fourteen tuple comparisons in Python's calls for every task pushed and
    popped."""

    def __init__(self) -> None:
        self.runs: list[list[tuple[float, int]]] = []

    def add(self, entries: list[tuple[float, int]]) -> None:
        """A batch of entries, in any order."""
        if entries:
            entries.sort()
            self.runs.append(entries)

    def due(self, t: float) -> list[tuple[float, int]]:
        """The entries ending by `t`, in order, taken out."""
        due: list[tuple[float, int]] = []
        bound = (t, math.inf)
        for run in self.runs:
            n = bisect_right(run, bound)
            if n:
                due += run[:n]
                del run[:n]
        if len(due) > 1:
            due.sort()
        self.runs = [run for run in self.runs if run]
        return due

    def first(self) -> float | None:
        """The earliest end, or None when nothing holds room."""
        return min([run[0][0] for run in self.runs], default=None)
