"""The free room of the alive workers, and what placement reads of the running tasks, kept by deltas.

A pass that copied and sorted every worker's room, and walked every running task for quota
use, fair-share use, the lowest running priority and the last placement, cost time in the
size of the cluster whatever it placed. The index is built once from the rooms and running
tasks read, then told of each change that moves room: a task placed (`add`), a task that
ended (`remove`), one starting to stop (`stop`), a worker joining or lost. Beside the rooms it
keeps, per group of workers (pool, constraints), the members sorted by free room; per project
the quota use; per pool and project the use fair share charges; per pool the running
priorities and the latest placement. A pass reads it and changes nothing in it: the book
copies a room only when it takes from it. Sums of fractional amounts drift by rounding as
deltas add up; a project's use restarts at exactly zero whenever it has nothing running.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace
from operator import itemgetter

from corral.core.constraints import AnyConstraint
from corral.scheduling.fragmentation import Fragmentation, Kind
from corral.scheduling.preemption import RunningTask
from corral.scheduling.rooms import (
    RANKED,
    Members,
    Request,
    WorkerRoom,
    plain_states,
    rank_keys,
    room_key,
    stated,
)

GroupKey = tuple[str, tuple[AnyConstraint, ...]]
# A kept measure remembers every state it has scored: past this many it is built afresh, so memory stays bounded.
MAX_KEPT_STATES = 50_000
Use = dict[str, dict[str, float]]  # project -> resource -> amount


class CapacityIndex:
    def __init__(self, rooms: Iterable[WorkerRoom], running: Iterable[RunningTask] = (),
                 quotas: Collection[str] | None = None, capped: Collection[int] | None = None,
                 workers_change: bool = True, turns: bool = True) -> None:
        """`rooms`: the alive workers in registration order, their free room already net of `running`.
        `quotas`: the only projects whose quota use is kept, where the policy cannot change while the index lives
        (a forecast); None keeps every project's. `capped`: likewise the only jobs whose tasks holding room are
        counted (what --max-running caps); None counts every job's. Without `workers_change` (a forecast: no
        worker joins or is lost), the tasks per worker, which only `join` and `lose` read, are not kept: two fewer
        updates per task placed and ended. Without `turns` (no pool takes round-robin turns while it lives), the
        pools' latest placements are not kept as tasks are placed, but found when asked."""
        self.quotas, self.capped, self.workers_change, self.turns = quotas, capped, workers_change, turns
        self.rooms: list[WorkerRoom] = [room.copy() for room in rooms]
        self.position = {room.id: i for i, room in enumerate(self.rooms)}
        self.running: dict[int, RunningTask] = {}
        self.on_worker: dict[str, set[int]] = defaultdict(set)
        self.quota_use: Use = {}
        self.pool_use: dict[str, Use] = {}
        self._tasks_of: Counter[str] = Counter()  # project -> running tasks
        self.tasks_of_job: Counter[int] = Counter()  # job -> its tasks holding room (what --max-running caps)
        self._pool_tasks_of: Counter[tuple[str, str]] = Counter()  # (pool, project) -> its tasks on alive workers
        self._priorities: dict[str, Counter[int]] = defaultdict(Counter)  # pool -> priority -> tasks
        self._latest: dict[str, RunningTask] = {}  # pool -> the task placed last
        self._stale_latest: set[str] = set()  # pools whose latest task ended: found again when asked
        self._capacity: dict[str, dict[str, float]] = {}
        self._groups: dict[GroupKey, Members] = {}
        self._ranked: dict[tuple[GroupKey, str], list[tuple]] = {}  # asked for by reasons only
        # Fragmentation-aware placement's view, kept while a pool's workers and request mix stay the same: per pool
        # the mix and its measure; each stated room's state id; per group, its members by state id.
        self._measures: dict[str, tuple[dict[Kind, float], Fragmentation]] = {}
        self._state_of: dict[int, int] = {}
        self._buckets: dict[GroupKey, dict[int, set[int]]] = {}
        # Rooms changed since the sorted views were last read, with their room_key then and whether it was plain:
        # the views are brought up to date when read, so a room that changes many times between passes is moved once.
        self._moved: dict[int, tuple[tuple, bool]] = {}
        self.sharing: set[int] = set()  # rooms with a device held as shares: a reason counts their devices
        self._renumbered()
        self._count_all(running)

    # What a pass reads ------------------------------------------------------------------------

    def group(self, pool: str, constraints: tuple[AnyConstraint, ...]) -> Members:
        """The members of a pool that match the constraints (a pass reads them, never changes them)."""
        self._settle()
        key = (pool, constraints)
        if key not in self._groups:
            self._groups[key] = Members.of(self.rooms, pool, constraints)
        return self._groups[key]

    def ranked(self, pool: str, constraints: tuple[AnyConstraint, ...], resource: str) -> list[tuple]:
        """The group's rank_key for one RANKED resource, sorted: the worker with the most free first."""
        group = self.group(pool, constraints)
        key = ((pool, constraints), resource)
        if key not in self._ranked:
            # Sorted on the amount alone: the members come in position order, and a sort keeps equals in order, so
            # the order is the keys' own, with no tuple compared.
            self._ranked[key] = sorted(rank_keys(self.rooms, group.members, resource), key=itemgetter(0))
        return self._ranked[key]

    def fragmentation(self, pool: str, weights: dict[Kind, float]) -> Fragmentation:
        """The pool's fragmentation measure for a mix of requests. Kept across passes while the pool's workers
        and the mix are unchanged: its scores depend on nothing else, and building it walks every worker."""
        kept = self._measures.get(pool)
        if kept is None or kept[0] != weights or len(kept[1].states) > MAX_KEPT_STATES:
            kept = self._measures[pool] = (weights, Fragmentation(weights, [r for r in self.rooms if r.pool == pool]))
            for key in [key for key in self._buckets if key[0] == pool]:
                del self._buckets[key]
            for i in [i for i in self._state_of if self.rooms[i].pool == pool]:  # in place: a pass holds this map
                del self._state_of[i]
        return kept[1]

    def states(self) -> dict[int, int]:
        """Each stated room's state id under its pool's kept measure (a pass copies, never changes it)."""
        self._settle()
        return self._state_of

    def buckets(self, pool: str, constraints: tuple[AnyConstraint, ...]) -> dict[int, set[int]]:
        """The group's members by state id under the pool's measure (`fragmentation` first); kept up to date by
        each change of room (when read), so a pass states only the rooms it changes (it copies these, never changes
        them)."""
        self._settle()
        key = (pool, constraints)
        if key not in self._buckets:
            measure = self._measures[pool][1]
            plain = plain_states(measure)
            by_state: dict[int, set[int]] = {}
            for i in self.group(pool, constraints).members:
                if i not in self._state_of:
                    self._state_of[i] = stated(measure, self.rooms[i], plain)
                by_state.setdefault(self._state_of[i], set()).add(i)
            self._buckets[key] = by_state
        return self._buckets[key]

    def capacity(self, pool: str) -> dict[str, float]:
        """What the pool's alive workers have in all, per resource."""
        return self._capacity.get(pool, {})

    def lowest_priorities(self) -> dict[str, int]:
        """Per pool, the lowest priority running on its alive workers."""
        return {pool: min(counts) for pool, counts in self._priorities.items()}

    def last_placed(self) -> dict[str, str]:
        """Per pool, the worker of the latest placement (the latest id among those placed at one moment)."""
        if not self.turns:
            self._stale_latest.update(room.pool for room in self.rooms)
        for pool in self._stale_latest:
            tasks = [t for t in self.running.values() if self._pool(t) == pool]
            if tasks:
                self._latest[pool] = max(tasks, key=_placed_order)
        self._stale_latest.clear()
        return {pool: task.worker_id for pool, task in self._latest.items()}

    # The changes that move room ---------------------------------------------------------------

    def add(self, task: RunningTask) -> None:
        """A task placed: it holds its room from now."""
        self._count((task,), 1)

    def add_all(self, tasks: Iterable[RunningTask]) -> None:
        """Tasks placed at one moment: as `add` for each, with the use of alike ones (project, pool, request,
        priority) charged at once."""
        self._count(tasks, 1)

    def add_placed(self, tasks: Iterable[RunningTask], rooms: Mapping[int, WorkerRoom]) -> None:
        """Tasks a pass over this index placed, all at one moment, with the rooms it took them from as it left them
        (`Placement.rooms`, by position): those rooms replace the index's own, their tasks' room not held again
        (a forecast starts every assignment of each pass); the rest as `add_all`."""
        moved, own = self._moved, self.rooms
        for i, room in rooms.items():
            if i not in moved:  # its room_key and plainness before, as `_count` notes them
                moved[i] = (room_key(own[i], i), _plain(own[i]))
            own[i] = room
        self._count(tasks, 1, rooms)

    def remove(self, task_id: int) -> None:
        """A task that ended: its room is free again."""
        task = self.running.get(task_id)
        if task is not None:
            self._count((task,), -1)

    def remove_all(self, task_ids: Iterable[int]) -> None:
        """Tasks that ended at one moment: as `remove` for each, with the use of alike ones given back at once."""
        running = self.running
        self._count([running[task_id] for task_id in task_ids if task_id in running], -1)

    def remove_tasks(self, tasks: Iterable[RunningTask]) -> None:
        """As `remove_all`, given the tasks themselves as the index holds them (`running`): none looked up again."""
        self._count(tasks, -1)

    def stop(self, task_id: int) -> None:
        """A task being evicted or terminated: it holds its room until it ends."""
        if task_id in self.running:
            self.running[task_id] = replace(self.running[task_id], stopping=True)

    def join(self, room: WorkerRoom) -> None:
        """A worker now alive, with all its room free: the tasks on record on it hold theirs."""
        assert self.workers_change, "an index built without workers_change keeps no tasks per worker"
        self.lose(room.id)
        joined = room.copy()
        for task_id in self.on_worker.get(room.id, ()):
            joined.hold(self.running[task_id].request, self.running[task_id].gpu_ids)
        self.rooms.append(joined)
        self._renumbered()
        for task_id in self.on_worker.get(room.id, ()):
            self._count_in_pool(self.running[task_id], 1, joined.pool)

    def join_all(self, rooms: Iterable[WorkerRoom]) -> None:
        """Workers now alive, as `join` takes them one after another, the positions found again once rather than
        once each (a thousand workers registering are a pass's thousand joins). One already alive is lost and joined
        again in turn, as `join` does: then they all go one by one, in order."""
        assert self.workers_change, "an index built without workers_change keeps no tasks per worker"
        rooms = list(rooms)
        if any(room.id in self.position for room in rooms):
            for room in rooms:
                self.join(room)
            return
        joined = []
        for room in rooms:
            copy = room.copy()
            for task_id in self.on_worker.get(room.id, ()):
                copy.hold(self.running[task_id].request, self.running[task_id].gpu_ids)
            self.rooms.append(copy)
            joined.append(copy)
        self._renumbered()
        for room in joined:
            for task_id in self.on_worker.get(room.id, ()):
                self._count_in_pool(self.running[task_id], 1, room.pool)

    def lose(self, worker_id: str) -> None:
        """A worker no longer alive: its room is gone; its tasks stay on record until they are reported ended."""
        assert self.workers_change, "an index built without workers_change keeps no tasks per worker"
        i = self.position.get(worker_id)
        if i is None:
            return
        for task_id in self.on_worker.get(worker_id, ()):
            self._count_in_pool(self.running[task_id], -1, self.rooms[i].pool)
        del self.rooms[i]
        self._renumbered()

    def lose_all(self, worker_ids: Iterable[str]) -> None:
        """Workers no longer alive, as `lose` takes them one after another, the positions found again once rather
        than once each (a thousand workers lost at once, behind a broken switch, are a pass's thousand losses)."""
        assert self.workers_change, "an index built without workers_change keeps no tasks per worker"
        lost = set()
        for worker_id in worker_ids:
            i = self.position.get(worker_id)
            if i is None or worker_id in lost:
                continue
            lost.add(worker_id)
            for task_id in self.on_worker.get(worker_id, ()):
                self._count_in_pool(self.running[task_id], -1, self.rooms[i].pool)
        if lost:
            self.rooms[:] = [room for room in self.rooms if room.id not in lost]
            self._renumbered()

    # Upkeep -----------------------------------------------------------------------------------

    def _renumbered(self) -> None:
        """Positions moved (a worker joined or was lost): the groups and totals are found again when asked."""
        self.position = {room.id: i for i, room in enumerate(self.rooms)}
        self._moved.clear()
        self._groups.clear()
        self._ranked.clear()
        self._measures.clear()
        self._state_of.clear()
        self._buckets.clear()
        self._capacity = {}
        self.sharing = {i for i, room in enumerate(self.rooms) if room.gpu_shared}
        for room in self.rooms:
            total = self._capacity.setdefault(room.pool, defaultdict(float))
            total["cpu"] += room.cpu
            total["memory"] += room.memory
            total["gpu"] += room.gpu
            for name, amount in room.custom.items():
                total[name] += amount

    def _count_all(self, running: Iterable[RunningTask]) -> None:
        """What `_count` adds task by task, added up at once: tasks alike (project, pool, request) are summed as
        one amount times their number."""
        alike: dict[tuple[str, str | None, Request], int] = {}
        # Alike tasks in a row (a job's, read together) are counted in a local and charged at the end of the row,
        # their requests compared by their fields' tuple: no request hashed or compared through its Python `__hash__`
        # and `__eq__` per task. The groups keep the order of their first tasks, and each its first task's request.
        last_fields: tuple | None = None
        last_key: tuple = ()
        in_row = 0
        capped, workers_change = self.capped, self.workers_change
        for task in running:
            self.running[task.task_id] = task
            if workers_change:
                self.on_worker[task.worker_id].add(task.task_id)
            if capped is None or task.job_id in capped:
                self.tasks_of_job[task.job_id] += 1
            i = self.position.get(task.worker_id)
            pool = None if i is None else self.rooms[i].pool
            request = task.request
            if request._fields == last_fields and pool == last_key[1] and task.project == last_key[0]:
                in_row += 1
            else:
                if in_row:
                    alike[last_key] = alike.get(last_key, 0) + in_row
                last_fields, last_key, in_row = request._fields, (task.project, pool, request), 1
            if pool is not None:
                self._priorities[pool][task.priority] += 1
                latest = self._latest.get(pool)
                if self.turns and (latest is None or task.since > latest.since or (
                        task.since == latest.since and task.task_id > latest.task_id)):  # _placed_order, unrolled
                    self._latest[pool] = task
        if in_row:
            alike[last_key] = alike.get(last_key, 0) + in_row
        for (project, pool, request), n in alike.items():
            amounts = request.amounts(n)
            if self.quotas is None or project in self.quotas:
                _add(self.quota_use, project, amounts)
                self._tasks_of[project] += n
            if pool is not None:
                _add(self.pool_use.setdefault(pool, {}), project, amounts)
                self._pool_tasks_of[pool, project] += n

    def _settle(self) -> None:
        """Move the rooms changed (`add`, `remove`) since the last read in the sorted views and restate them; where
        many changed, sorting a view afresh costs less than moving each (the order is the same either way)."""
        if not self._moved:
            return
        changes, self._moved = self._moved, {}
        moved: dict[int, tuple[tuple, tuple]] = {}  # room -> (its key before, its key now)
        restate: list[int] = []  # rooms back to the same key, plain before and after, are in the same state
        became_gpuless: set[int] = set()  # rooms with no GPU free now that had some, and the other way
        ceased_gpuless: set[int] = set()
        for i, (old, plain) in changes.items():
            room = self.rooms[i]
            new = (len(room.free_gpu_ids), room.free_cpu, room.free_memory, i)  # room_key, unrolled: every room moved
            if new != old:
                moved[i] = (old, new)
                restate.append(i)
                if (not old[0]) is not (not new[0]):
                    (became_gpuless if not new[0] else ceased_gpuless).add(i)
            elif not (plain and _plain(room)):
                restate.append(i)
        for key, members in self._groups.items():
            changed = members.member_set.intersection(moved)
            if not changed:
                continue
            # The members with no GPU free, kept: counted by set intersections (in C), not by a walk of the changed.
            members.gpuless += len(changed.intersection(became_gpuless)) - len(changed.intersection(ceased_gpuless))
            if len(changed) * 8 > len(members.members):  # sorted again when read
                members.unsort()
                for resource in RANKED:
                    self._ranked.pop((key, resource), None)
                continue
            for i in changed:
                old, new = moved[i]
                if not members.stale:
                    _resort(members.keys, old, new)
                for resource in RANKED:
                    ranked = self._ranked.get((key, resource))
                    if ranked is not None:
                        _resort(ranked, _rank_of(old, resource), _rank_of(new, resource))
        state_of, rooms, measures = self._state_of, self.rooms, self._measures
        # (a state before, a state now) -> the rooms restated so: a forecast's thousands of rooms move between some
        # tens of pairs of states, so each bucketed group moves its members a pair at a time, by set operations.
        restated: dict[tuple[int, int], set[int]] = {}
        # The pool's measure and its plain_states, found again only where the pool changes from the room before (a
        # forecast's rooms are most often of one pool).
        pool = measure = memo = None
        for i in restate:
            old_state = state_of.get(i)
            if old_state is not None:
                room = rooms[i]
                if room.pool != pool:
                    pool = room.pool
                    measure = measures[pool][1]
                    memo = plain_states(measure)
                new_state = stated(measure, room, memo)
                state_of[i] = new_state
                if new_state != old_state:
                    pair = (old_state, new_state)
                    rooms_so = restated.get(pair)
                    if rooms_so is None:
                        restated[pair] = {i}
                    else:
                        rooms_so.add(i)
        if restated:
            # Each bucketed group's restated members found by set intersections (in C), rather than each room's
            # groups looked up in turn, every look-up hashing a group key and its constraints.
            for key, by_state in self._buckets.items():
                member_set = self._groups[key].member_set
                for (old_state, new_state), rooms_so in restated.items():
                    moving = member_set.intersection(rooms_so)
                    if moving:
                        _move(by_state, old_state, new_state, moving)

    def _pool(self, task: RunningTask) -> str | None:
        i = self.position.get(task.worker_id)
        return None if i is None else self.rooms[i].pool

    def _count(self, tasks: Iterable[RunningTask], sign: int, taken: Collection[int] = ()) -> None:
        """Count tasks placed (sign 1) or ended (-1), and move their rooms (but those at positions in `taken`, which
        hold the tasks placed already). The use they charge is summed per alike group (project, pool, request,
        priority) first: all of a call's tasks move the same way, so no count passes through zero before the end, and
        the totals are those that charging one by one gives."""
        running, on_worker, tasks_of_job, position, rooms, moved = self.running, self.on_worker, self.tasks_of_job, \
            self.position, self.rooms, self._moved
        capped, workers_change = self.capped, self.workers_change
        alike: dict[tuple, int] = {}
        last_request, last_fields, last_key, in_row = None, None, (), 0  # the task before: its request and its
        # fields, its alike key, and how many alike tasks in a row ended with it (charged at the end of the row: an
        # alike group is first charged where its first row ends, so the groups keep the order of their first tasks)
        latest = self._latest if sign > 0 and self.turns else None  # the pools' latest placements, as they go
        for task in tasks:
            job_id, worker_id, task_id, request = task.job_id, task.worker_id, task.task_id, task.request
            if capped is None or job_id in capped:
                held = tasks_of_job[job_id] + sign
                if held:
                    tasks_of_job[job_id] = held
                else:
                    del tasks_of_job[job_id]
            if sign > 0:
                running[task_id] = task
                if workers_change:
                    on_worker[worker_id].add(task_id)
            else:
                del running[task_id]
                if workers_change:
                    worker_tasks = on_worker[worker_id]
                    worker_tasks.discard(task_id)
                    if not worker_tasks:
                        del on_worker[worker_id]
            i = position.get(worker_id)
            pool = None
            if i is not None:
                room = rooms[i]
                pool = room.pool
                if latest is not None:  # _latest_after, unrolled
                    last = latest.get(pool)
                    if last is None or task.since > last.since or (
                            task.since == last.since and task.task_id > last.task_id):
                        latest[pool] = task
                if i not in moved:  # its room_key, and whether it is plain (`_plain`, unrolled)
                    moved[i] = ((len(room.free_gpu_ids), room.free_cpu, room.free_memory, i), not (
                        room.gpu_memory or room.gpu_shared or room.gpu_memory_shared or room.free_custom))
                if sign > 0:
                    if i not in taken:
                        room.hold(request, task.gpu_ids)
                else:
                    room.give(request, task.gpu_ids)
                if request.share:
                    if room.gpu_shared:
                        self.sharing.add(i)
                    else:
                        self.sharing.discard(i)
            if (request is last_request or request._fields == last_fields) and pool == last_key[1] \
                    and task.project == last_key[0] and task.priority == last_key[3]:
                # alike tasks come in a row, holding one request (placed ones) or equal ones (those read running, each
                # its own): counted with no request hashed, nor compared through its Python `__eq__`
                in_row += 1
            else:
                if in_row:
                    alike[last_key] = alike.get(last_key, 0) + in_row
                last_request, last_fields = request, request._fields
                last_key, in_row = (task.project, pool, request, task.priority), 1
        if in_row:
            alike[last_key] = alike.get(last_key, 0) + in_row
        if latest is not None:
            for pool in self._stale_latest.intersection(latest):  # found again when asked, as before these
                del latest[pool]
        elif sign < 0:  # a pool whose latest placement ended finds it again when asked
            for pool in [pool for pool, task in self._latest.items() if task.task_id not in running]:
                del self._latest[pool]
                self._stale_latest.add(pool)
        quotas = self.quotas
        for (project, pool, request, priority), n in alike.items():
            if quotas is None or project in quotas:
                _charge(self.quota_use, self._tasks_of, project, project, request, sign * n)
            if pool is not None:
                self._charge_pool(project, request, priority, sign * n, pool)

    def _count_in_pool(self, task: RunningTask, sign: int, pool: str) -> None:
        self._charge_pool(task.project, task.request, task.priority, sign, pool)
        self._latest_after(task, sign, pool)

    def _charge_pool(self, project: str, request: Request, priority: int, change: int, pool: str) -> None:
        """Charge (or give back) `change` tasks of one request, project and priority to the pool."""
        use = self.pool_use.get(pool)
        if use is None:
            use = self.pool_use[pool] = {}
        _charge(use, self._pool_tasks_of, (pool, project), project, request, change)
        if not use:
            del self.pool_use[pool]
        priorities = self._priorities[pool]
        running = priorities[priority] + change
        if running:
            priorities[priority] = running
        else:
            del priorities[priority]
            if not priorities:
                del self._priorities[pool]

    def _latest_after(self, task: RunningTask, sign: int, pool: str) -> None:
        """The pool's latest placement, after a task placed (sign 1) or ended (-1) there."""
        latest = self._latest.get(pool)
        if sign > 0:
            if pool not in self._stale_latest and (
                    latest is None or task.since > latest.since
                    or (task.since == latest.since and task.task_id > latest.task_id)):  # _placed_order, unrolled
                self._latest[pool] = task
        elif latest is not None and latest.task_id == task.task_id:
            del self._latest[pool]
            self._stale_latest.add(pool)


def _resort(entries: list[tuple], old: tuple, new: tuple) -> None:
    """Move a room's entry in a sorted list."""
    entries.pop(bisect_left(entries, old))
    insort(entries, new)


def _plain(room: WorkerRoom) -> bool:
    """Whether the room's fragmentation state follows from its room_key (and its labels) alone: no device memory
    known, no shares, no custom slots."""
    return not (room.gpu_memory or room.gpu_shared or room.gpu_memory_shared or room.free_custom)


def _rank_of(key: tuple, resource: str) -> tuple[float, int]:
    """The rank_key of a room for a RANKED resource, from its room_key."""
    gpus, cpu, memory, i = key
    return (-(gpus if resource == "gpu" else cpu if resource == "cpu" else memory), i)


def _move(by_state: dict[int, set[int]], old: int, new: int, moving: set[int]) -> None:
    """Move rooms from one state's bucket to another's (`moving` becomes the new bucket where it had none)."""
    left = by_state[old]
    left -= moving
    if not left:
        del by_state[old]
    bucket = by_state.get(new)
    if bucket is None:
        by_state[new] = moving
    else:
        bucket |= moving


def _charge(use: Use, counts: Counter, count_key, project: str, request: Request, change: int) -> None:
    """Add (or take back, `change` below 0) the amounts of `change` tasks of one request to a project's use; with none
    of its tasks left, its use is dropped, so that rounding never leaves a trace of what ended."""
    left = counts[count_key] + change
    if not left:
        del counts[count_key]
        use.pop(project, None)
        return
    counts[count_key] = left
    project_use = use.get(project)
    if project_use is None:
        project_use = use[project] = defaultdict(float)
    for resource, amount in request.per_task.items():
        project_use[resource] += amount * change


def _add(use: Use, project: str, amounts: dict[str, float]) -> None:
    project_use = use.setdefault(project, defaultdict(float))
    for resource, amount in amounts.items():
        project_use[resource] += amount


def _placed_order(task: RunningTask) -> tuple[float, int]:
    return (task.since, task.task_id)
