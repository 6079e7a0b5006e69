"""The reads a scheduling pass needs, a handful of queries: workers and their free room, the tasks
holding room, the placement facts of active jobs, where retried tasks failed, dependencies, policy;
and the capacity index the engine keeps across passes, brought up to date from the history.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import AsyncIterator, Collection, Iterable
from contextlib import asynccontextmanager

from sqlalchemy import and_, bindparam, func, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.core.spec import MAX_GPU
from corral.core.states import JOB_ACTIVE, TASK_HOLDS_RESOURCES, TaskState, WorkerState
from corral.scheduling.capacity import CapacityIndex
from corral.scheduling.preemption import RunningTask
from corral.scheduling.rooms import Request, WorkerRoom, overbooking
from corral.scheduling.snapshot import NO_FACTS, ClusterSnapshot, JobEnd, JobPlacement
from corral.store.changes import StaleWrite
from corral.store.off_loop import converted, rows_of
from corral.store.policy import read_policy
from corral.store.schema import attempts, history, jobs, tasks, workers

CHUNK = 5000  # ids per IN (...) list, under every driver's parameter limit
STOPPING = frozenset({TaskState.PREEMPTING, TaskState.TERMINATING})
GAP_SECONDS = 60.0  # how long an id skipped by the rows read is looked for again (a rolled-back id never comes)
GAP_WINDOW = 1000  # ids behind the latest at a build that may still be committing
MAX_GAPS = 10_000  # more ids missing at once than this: rebuilt instead of looked for one by one


async def read_cluster(connection: AsyncConnection, kept: KeptCapacity | None = None,
                       job_ids: Collection[int] = (), retried: Collection[int] | None = None) -> ClusterSnapshot:
    """The whole cluster read afresh; with `kept`, its index brought up to date instead, and the placement facts
    of `job_ids` only (the pass's targets). With `retried` (the targets' pending tasks past their first attempt, the
    only pending tasks an attempt can have failed of: a task's attempt counts up as it goes back to the queue),
    the workers only those failed on are read, and none where there are none (a run of new tasks)."""
    if kept is not None:
        unreadable: dict[int, str] = {}
        index = await kept.refresh(connection)
        job_facts = await kept.facts(connection, job_ids, unreadable)
        avoid = await _failed_on(connection) if retried is None else await _failed_on_tasks(connection, retried)
        return ClusterSnapshot(unreadable=unreadable, jobs=job_facts, index=index, avoid=avoid,
                               dependencies=await _dependencies(connection, job_facts),
                               policy=await read_policy(connection))
    unreadable = {}
    job_facts = await _active_jobs(connection, unreadable)
    running = await _running_tasks(connection, job_facts)
    return ClusterSnapshot(
        unreadable=unreadable,
        rooms=await _rooms(connection, running),
        running=running,
        jobs=job_facts,
        avoid=await _failed_on(connection),
        dependencies=await _dependencies(connection, job_facts),
        policy=await read_policy(connection),
    )


async def rooms_and_running(connection: AsyncConnection) -> tuple[list[WorkerRoom], list[RunningTask]]:
    """Alive workers with their free room, and the tasks holding it, as placement sees them (the serving router
    asks what fits). Only the jobs holding room are read: a backlog of pending jobs costs this nothing."""
    running = await _running_tasks(connection, await _active_jobs(connection, holding_room_only=True))
    return await _rooms(connection, running), running


async def _active_jobs(connection: AsyncConnection, unreadable: dict[int, str] | None = None, *,
                       holding_room_only: bool = False) -> dict[int, JobPlacement]:
    """The placement facts of active jobs (`holding_room_only`: of those with tasks holding room). A spec that
    cannot be read (a row older than a validation) is noted in `unreadable` and read as the defaults, so that
    the room its running tasks hold is still counted."""
    query = (select(jobs.c.id, jobs.c.spec, jobs.c.priority, jobs.c.gang)
             .where(jobs.c.state.in_([str(s) for s in JOB_ACTIVE])))
    if holding_room_only:
        query = query.where(jobs.c.id.in_(select(tasks.c.job_id).where(_HOLDS_ROOM)))
    rows = (await connection.execute(query)).all()
    facts = {}
    for row in rows:
        facts[row.id], why = _placement(row)
        if why is not None and unreadable is not None:
            unreadable[row.id] = why
    return facts


def _placement(row) -> tuple[JobPlacement, str | None]:
    """A job's placement facts from its row, and why its spec cannot be read (then read as the defaults)."""
    try:
        return JobPlacement.from_spec(row.spec, priority=row.priority, gang=row.gang), None
    except Exception as error:
        return (JobPlacement(priority=row.priority, gang=row.gang),
                f"its spec cannot be read: {type(error).__name__}: {error}")


async def _running_tasks(connection: AsyncConnection, job_facts: dict[int, JobPlacement]) -> list[RunningTask]:
    rows = (await connection.execute(_TASK_ROOMS.where(_HOLDS_ROOM))).all()
    return [_running_task(row, job_facts.get(row.job_id, NO_FACTS)) for row in rows]


# A task's columns that say what room it holds, with when its attempt was placed.
_TASK_ROOMS = (select(tasks.c.id, tasks.c.job_id, tasks.c.worker_id, tasks.c.state, tasks.c.cpu, tasks.c.memory,
                      tasks.c.gpu, tasks.c.gpu_ids, attempts.c.assigned_at)
               .select_from(tasks.outerjoin(attempts, and_(attempts.c.task_id == tasks.c.id,
                                                           attempts.c.attempt == tasks.c.attempt))))


def _running_task(row, job: JobPlacement) -> RunningTask:
    return RunningTask(
        task_id=row.id, job_id=row.job_id, worker_id=row.worker_id,
        request=Request(row.cpu, row.memory, row.gpu, job.custom, job.gpu_memory),
        gpu_ids=tuple(row.gpu_ids or ()),
        priority=job.priority, project=job.project, since=row.assigned_at or 0.0, gang=job.gang,
        stopping=TaskState(row.state) in STOPPING,
    )


_HOLDS_ROOM = and_(tasks.c.state.in_([str(s) for s in TASK_HOLDS_RESOURCES]), tasks.c.worker_id.is_not(None))


async def _rooms(connection: AsyncConnection, running: list[RunningTask]) -> list[WorkerRoom]:
    """Alive workers with their free room: capacity minus what the tasks holding room reserve."""
    alive = (await connection.execute(
        select(*ROOM_COLUMNS).where(workers.c.state == WorkerState.ALIVE).order_by(workers.c.registered_at)
    )).all()
    on_worker: dict[str, list[RunningTask]] = defaultdict(list)
    for task in running:
        on_worker[task.worker_id].append(task)
    rooms = []
    for worker in alive:
        room = _free_room(worker)
        for task in on_worker.get(worker.id, ()):
            room.hold(task.request, task.gpu_ids)
        rooms.append(room)
    return rooms


# The worker columns a room is made of (and its state): not the ones a heartbeat rewrites, as its GPU readings and
# cached environments, which a pass would otherwise decode for every worker it reads.
ROOM_COLUMNS = (workers.c.id, workers.c.name, workers.c.state, workers.c.cpu, workers.c.memory, workers.c.gpu,
                workers.c.pool, workers.c.labels, workers.c.custom, workers.c.gpu_devices, workers.c.filesystem,
                workers.c.shared_fs, workers.c.pythons)


def _free_room(worker) -> WorkerRoom:
    """A worker's room from its row, all of it free."""
    custom = {name: float(amount) for name, amount in (worker.custom or {}).items()}
    gpus = min(worker.gpu, MAX_GPU)  # a row from before registration was bounded costs what a real machine does
    return WorkerRoom(
        id=worker.id, name=worker.name, cpu=worker.cpu, memory=worker.memory, gpu=gpus,
        free_cpu=worker.cpu, free_memory=worker.memory, free_gpu_ids=list(range(gpus)),
        pool=worker.pool, labels=dict(worker.labels or {}), custom=custom, free_custom=dict(custom),
        gpu_memory=_device_memory(gpus, worker.gpu_devices), pythons=tuple(worker.pythons or ()),
        filesystem=worker.filesystem, shared_fs=tuple(worker.shared_fs or ()))


@asynccontextmanager
async def capacity_fence(connection: AsyncConnection, worker_ids: Collection[str],
                         kept: KeptCapacity | None = None) -> AsyncIterator[None]:
    """The capacity fence of a transaction that places tasks on these workers, around the flush of its changes.

    First their rows are locked (FOR UPDATE, in id order; before the task rows, as a heartbeat takes them, so the two
    never wait on each other in a circle): another placing transaction waits there for this one's end. After the
    flush their room is worked out again from the task rows as they are now, which a transaction that waited reads
    with the first one's commit. StaleWrite when one is over-booked, no longer alive or gone: another controller's
    pass booked it first, and this transaction commits nothing. The placement facts of the jobs holding room come
    from `kept` where it has them (a job's spec never changes once stored); the others are read. On SQLite, with
    one writer, no row needs a lock: the workers are read after the flush with the tasks holding room on them, in
    one statement, and judged alike."""
    ids = sorted(worker_ids)
    if not ids:
        yield
        return
    rows, held = [], []
    if connection.dialect.name == "sqlite":  # one writer: nothing to lock, so the workers are read with their tasks
        yield
        for start in range(0, len(ids), CHUNK):
            for row in (await connection.execute(_WORKERS_HOLDING, {"ids": ids[start:start + CHUNK]})).all():
                if not rows or rows[-1].id != row.id:
                    rows.append(row)
                if row.job_id is not None:
                    held.append(row[-6:])
    else:
        for start in range(0, len(ids), CHUNK):
            rows += (await connection.execute(_LOCK_WORKERS, {"ids": ids[start:start + CHUNK]})).all()
        yield
        for start in range(0, len(ids), CHUNK):
            held += (await connection.execute(_HELD_ON, {"ids": ids[start:start + CHUNK]})).all()
    facts = await (kept or KeptCapacity()).placements(connection, {job_id for _, job_id, *_ in held})
    # What each task holds, a request and its devices; equal requests are one object (a pass may place thousands
    # of tasks of a few kinds), and the rows are unpacked by position (a row answers a name some twenty times slower).
    requests: dict[tuple, Request] = {}
    on_worker: dict[str, list[tuple[Request, tuple[int, ...]]]] = defaultdict(list)
    for worker_id, job_id, cpu, memory, gpu, gpu_ids in held:
        job = facts.get(job_id, NO_FACTS)
        asked = (cpu, memory, gpu, job.custom, job.gpu_memory)
        request = requests.get(asked) or requests.setdefault(asked, Request(*asked))
        on_worker[worker_id].append((request, tuple(gpu_ids or ())))
    gone = set(ids) - {worker.id for worker in rows}
    if gone:
        raise StaleWrite(f"workers {sorted(gone)} are gone: placed on after they left")
    for worker in rows:
        if worker.state != WorkerState.ALIVE:
            raise StaleWrite(f"worker {worker.name} is {worker.state}: placed on after it left")
        over = overbooking(_free_room(worker), on_worker[worker.id])
        if over is not None:
            raise StaleWrite(f"worker {worker.name} is over-booked ({over}): another pass booked it first")


# The fence's statements, made once (every placing run runs them): made afresh, each cost more to build and to walk
# for SQLAlchemy's cache key than to run. The workers' ids are an expanding parameter.
_LOCK_WORKERS = (select(*ROOM_COLUMNS).where(workers.c.id.in_(bindparam("ids", expanding=True)))
                 .order_by(workers.c.id).with_for_update())
_HELD_ON = (select(tasks.c.worker_id, tasks.c.job_id, tasks.c.cpu, tasks.c.memory, tasks.c.gpu, tasks.c.gpu_ids)
            .where(_HOLDS_ROOM, tasks.c.worker_id.in_(bindparam("ids", expanding=True))))
# On SQLite, both read once the changes are flushed, in one statement: each worker's row on each task holding room
# on it (its last six columns those of `_HELD_ON`), one row of NULL task columns for a worker that holds none.
_WORKERS_HOLDING = (select(*ROOM_COLUMNS, *_HELD_ON.selected_columns)
                    .select_from(workers.outerjoin(tasks, and_(tasks.c.worker_id == workers.c.id, _HOLDS_ROOM)))
                    .where(workers.c.id.in_(bindparam("ids", expanding=True))).order_by(workers.c.id))


async def file_systems_in_pool(connection: AsyncConnection, pool: str) -> list[tuple[str | None, list[str]]]:
    """The file system id and the shared directories of each alive worker of `pool`."""
    rows = (await connection.execute(
        select(workers.c.filesystem, workers.c.shared_fs)
        .where(workers.c.state == WorkerState.ALIVE, workers.c.pool == pool))).all()
    return [(row.filesystem, list(row.shared_fs or ())) for row in rows]


def _device_memory(gpus: int, devices: list[dict] | None) -> tuple[int, ...]:
    """Bytes per device index as NVML reported them; empty when no device's memory is known (virtual GPUs)."""
    by_index = {device["index"]: device.get("memory") or 0 for device in devices or ()}
    memory = tuple(by_index.get(i, 0) for i in range(gpus))
    return memory if any(memory) else ()


_FAILED_ON = (select(attempts.c.task_id, attempts.c.worker_id)
              .select_from(attempts.join(tasks, tasks.c.id == attempts.c.task_id))
              .where(tasks.c.state == TaskState.PENDING, attempts.c.state == TaskState.FAILED,
                     attempts.c.worker_id.is_not(None)))


async def _failed_on(connection: AsyncConnection) -> dict[int, frozenset[str]]:
    """Workers each pending task already failed on."""
    return _workers_by_task((await connection.execute(_FAILED_ON)).all())


_FAILED_OF = (select(attempts.c.task_id, attempts.c.worker_id)
              .where(attempts.c.task_id.in_(bindparam("ids", expanding=True)), attempts.c.state == TaskState.FAILED,
                     attempts.c.worker_id.is_not(None)))


async def _failed_on_tasks(connection: AsyncConnection, task_ids: Collection[int]) -> dict[int, frozenset[str]]:
    """Workers each of these (pending) tasks already failed on: `_failed_on` of these tasks alone."""
    ids = sorted(task_ids)
    rows = []
    for start in range(0, len(ids), CHUNK):
        rows += (await connection.execute(_FAILED_OF, {"ids": ids[start:start + CHUNK]})).all()
    return _workers_by_task(rows)


def _workers_by_task(rows: Iterable[tuple[int, str]]) -> dict[int, frozenset[str]]:
    """(task id, worker id) rows as each task's set of workers."""
    failed: dict[int, set[str]] = defaultdict(set)
    for task_id, worker_id in rows:
        failed[task_id].add(worker_id)
    return {task_id: frozenset(ids) for task_id, ids in failed.items()}


async def _dependencies(connection: AsyncConnection, job_facts: dict[int, JobPlacement]) -> dict[int, JobEnd]:
    wanted = sorted({j for job in job_facts.values() for j in (*job.after, *job.after_any)})
    ends: dict[int, JobEnd] = {}
    for start in range(0, len(wanted), CHUNK):
        for row in (await connection.execute(
            select(jobs.c.id, jobs.c.state, jobs.c.finished_at).where(jobs.c.id.in_(wanted[start:start + CHUNK]))
        )).all():
            ends[row.id] = JobEnd(str(row.state), row.finished_at)
    return ends


class KeptCapacity:
    """The capacity index the engine keeps across scheduling passes, and the parsed placement facts of jobs.

    Why it stays right: every change of a fact the index holds writes a history row in the same transaction.
    A task's state moves go through the one write path with a row each (its placement, worker and GPUs
    with its move to ASSIGNED); a worker's registration, its loss and the Pythons it finds later are rows of
    the worker's own. What has no row never changes: a worker's pool, labels and capacity are fixed under
    its id (coming back is a new id), a job's spec and priority once stored. So the rows past the last one
    read name every task and worker whose room may have moved, and each pass re-reads exactly those as they
    are now: a task's state decides whether it holds room, a worker's whether it is alive. Reading current
    facts makes the order of the rows irrelevant; only a row never read could leave the index wrong.
    On SQLite one writer commits at a time, so ids commit in order. With several writers (PostgreSQL) an id
    may commit after a higher one was read: each id skipped is looked for again every pass until it appears
    or is GAP_SECONDS old (a rolled-back id never appears). The index is built afresh on the first pass, on
    another database, or when the ids went back (the database was replaced).
    """

    def __init__(self) -> None:
        self.index: CapacityIndex | None = None
        self.seen = 0  # the highest history id read
        self.gaps: dict[int, float] = {}  # ids below `seen` not read yet -> when first missed
        self.rebuilds = 0
        self._database = None
        self._facts: dict[int, tuple[JobPlacement, str | None]] = {}  # job -> its placement facts, parsed once

    async def refresh(self, connection: AsyncConnection) -> CapacityIndex:
        """The index as the store is now: built on the first call, else updated by the rows since the last."""
        now = time.monotonic()
        if self.index is None or self._database is not connection.sync_engine:
            return await self._build(connection, now)
        gaps = [i for i, since in self.gaps.items() if now - since < GAP_SECONDS]
        statement, parameters = ((_HISTORY_PAST_GAPS, {"seen": self.seen, "gaps": gaps}) if gaps
                                 else (_HISTORY_PAST, {"seen": self.seen}))
        rows = await rows_of(await connection.execute(statement, parameters), PLAIN_ON_LOOP)
        if not rows and await _latest_id(connection) < self.seen:
            return await self._build(connection, now)  # the ids went back: another database
        self.gaps = {i: self.gaps[i] for i in gaps}
        ids, task_ids, worker_ids = await converted(len(rows), _named, rows, on_loop=PLAIN_ON_LOOP)
        if not self._note_gaps(ids, now):
            return await self._build(connection, now)
        if not await self._workers_changed(connection, worker_ids):
            return await self._build(connection, now)
        await self._tasks_changed(connection, task_ids)
        return self.index

    async def facts(self, connection: AsyncConnection, job_ids: Collection[int],
                    unreadable: dict[int, str]) -> dict[int, JobPlacement]:
        """The placement facts of these jobs (specs never change once stored: each is parsed once); those of jobs
        neither asked for nor holding room are forgotten."""
        await self._read_facts(connection, job_ids)
        facts = {}
        for job_id in job_ids:
            facts[job_id], why = self._facts.get(job_id, (NO_FACTS, None))
            if why is not None:
                unreadable[job_id] = why
        if self.index is not None and len(self._facts) > 2 * (len(job_ids) + len(self.index.tasks_of_job)):
            keep = set(job_ids) | set(self.index.tasks_of_job)
            self._facts = {job_id: fact for job_id, fact in self._facts.items() if job_id in keep}
        return facts

    async def placements(self, connection: AsyncConnection, job_ids: Collection[int]) -> dict[int, JobPlacement]:
        """The placement facts of these jobs, those of a spec that cannot be read as the defaults; only the jobs
        not kept yet are read."""
        await self._read_facts(connection, job_ids)
        return {job_id: self._facts[job_id][0] for job_id in job_ids if job_id in self._facts}

    async def _build(self, connection: AsyncConnection, now: float) -> CapacityIndex:
        self.rebuilds += 1
        self._database = connection.sync_engine
        self._facts.clear()  # job ids may name other jobs in another database
        self.seen = await _latest_id(connection)
        recent = (await connection.execute(
            select(history.c.id).where(history.c.id > self.seen - GAP_WINDOW))).scalars().all()
        self.gaps = {}
        self._note_gaps(recent, now, after=max(self.seen - GAP_WINDOW, 0))
        self.seen = max(recent, default=self.seen)
        running = await _running_tasks(connection, await _active_jobs(connection, holding_room_only=True))
        self.index = CapacityIndex(await _rooms(connection, running), running)
        return self.index

    def _note_gaps(self, ids: list[int], now: float, after: int | None = None) -> bool:
        """Read `ids`: those between the last seen and the highest read that were not are gaps to look for again.
        False when too many are missing to look for one by one."""
        for found in ids:
            self.gaps.pop(found, None)
        start = self.seen if after is None else after
        top = max(ids, default=start)
        if top <= start:
            return True
        missing = top - start - len([i for i in ids if i > start])
        if missing > MAX_GAPS:
            return False
        if missing:
            read = set(ids)
            self.gaps.update((i, now) for i in range(start + 1, top) if i not in read)
        self.seen = max(self.seen, top)
        return True

    async def _workers_changed(self, connection: AsyncConnection, worker_ids: set[str]) -> bool:
        """Join the workers now alive, lose the others; False when an alive worker's room changed in place
        (Pythons found), which the index cannot take in by deltas."""
        if not worker_ids:
            return True
        alive = {row.id: _free_room(row) for row in (await connection.execute(
            select(*ROOM_COLUMNS).where(workers.c.id.in_(worker_ids), workers.c.state == WorkerState.ALIVE)
            .order_by(workers.c.registered_at))).all()}
        index = self.index
        index.lose_all(sorted(worker_ids - alive.keys()))
        joined = []
        for worker_id, room in alive.items():
            i = index.position.get(worker_id)
            if i is None:
                joined.append(room)
            elif index.rooms[i].pythons != room.pythons:
                return False
        index.join_all(joined)
        return True

    async def _tasks_changed(self, connection: AsyncConnection, task_ids: set[int]) -> None:
        """Each task's room as its row says now: given back, then held again if it still holds it (one unchanged is
        left alone, so that the pool's latest placement is not looked for again).

        The rows are read here, on the event loop; making them running tasks and moving them in the index is pure CPU
        (hundreds of milliseconds for thousands of tasks), done in a thread where they are many. Nothing else reads
        the index meanwhile: each holder (the engine's placing handler, the estimator, a what-if's estimator) has its
        own, read only by the pass that refreshes it, after this returns."""
        ids = sorted(task_ids)
        holding = []
        for start in range(0, len(ids), CHUNK):
            holding += await rows_of(await connection.execute(_ROOMS_OF_TASKS, {"ids": ids[start:start + CHUNK]}))
        job_ids = {job_id for _, job_id, *_ in holding}  # by position: a row answers a name some twenty times slower
        await self._read_facts(connection, job_ids)
        facts = {job_id: self._facts.get(job_id, (NO_FACTS, None))[0] for job_id in job_ids}
        # Taken while it moves: a pass cancelled meanwhile leaves the next one to build it afresh.
        index, self.index = self.index, None
        await converted(len(ids), _move_tasks, index, ids, holding, facts)
        self.index = index

    async def _read_facts(self, connection: AsyncConnection, job_ids: Collection[int]) -> None:
        missing = sorted(set(job_ids) - self._facts.keys())
        for start in range(0, len(missing), CHUNK):
            for row in (await connection.execute(_PLACEMENT_FACTS, {"ids": missing[start:start + CHUNK]})).all():
                self._facts[row.id] = _placement(row)


# The refresh's statements, made once (every placing run refreshes the index): the ids an expanding parameter.
_HISTORY_ROWS = select(history.c.id, history.c.task_id, history.c.worker_id, history.c.job_id, history.c.deployment_id)
_HISTORY_PAST = _HISTORY_ROWS.where(history.c.id > bindparam("seen"))
_HISTORY_PAST_GAPS = _HISTORY_ROWS.where(or_(history.c.id > bindparam("seen"),
                                             history.c.id.in_(bindparam("gaps", expanding=True))))
_ROOMS_OF_TASKS = (_TASK_ROOMS.where(tasks.c.id.in_(bindparam("ids", expanding=True)), _HOLDS_ROOM)
                   .order_by(tasks.c.id))
_PLACEMENT_FACTS = (select(jobs.c.id, jobs.c.spec, jobs.c.priority, jobs.c.gang)
                    .where(jobs.c.id.in_(bindparam("ids", expanding=True))))
_LATEST_ID = select(func.max(history.c.id))


# History rows (five plain columns) read and named on the loop: a pass's few hundred cost it less than a hop to a
# thread and back, which on a busy machine waits for a core while the writer is held (off_loop's ON_LOOP, 32, is for
# rows of parsed JSON; a placing run of 8 new jobs reads some 64 history rows, and took two hops for them).
PLAIN_ON_LOOP = 512


async def _latest_id(connection: AsyncConnection) -> int:
    return (await connection.execute(_LATEST_ID)).scalar() or 0


def _named(rows: list) -> tuple[list[int], set[int], set[str]]:
    """The history rows' ids, the tasks they name, and the workers named by rows of their own (neither a job's nor a
    deployment's): thousands of rows a pass when many tasks move, unpacked by position (faster than by name)."""
    ids, task_ids, worker_ids = [], set(), set()
    for row_id, task_id, worker_id, job_id, deployment_id in rows:
        ids.append(row_id)
        if task_id is not None:
            task_ids.add(task_id)
        if job_id is None and deployment_id is None and worker_id is not None:
            worker_ids.add(worker_id)
    return ids, task_ids, worker_ids


def _move_tasks(index: CapacityIndex, task_ids: list[int], holding: list, facts: dict[int, JobPlacement]) -> None:
    """Move these tasks in the index as their rows say now (`holding`: the rows of those that hold room)."""
    now = {row.id: _running_task(row, facts[row.job_id]) for row in holding}
    for task_id in task_ids:
        if task_id not in now or index.running.get(task_id) != now[task_id]:
            index.remove(task_id)  # a no-op for one not on record
    for task_id, task in now.items():
        if index.running.get(task_id) != task:
            index.add(task)
