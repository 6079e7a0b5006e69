"""Priority preemption as a pure choice: who is evicted, why those, and what is never done."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core.config import PoolPolicy, Sequencer
from corral.scheduling.placement import Unit, place
from corral.scheduling.policy import Policy
from corral.scheduling.preemption import RunningTask, choose_victims
from corral.scheduling.reasons import AwaitingPreempted, Moving, NoRoom, Preempting
from corral.scheduling.rooms import Request, WorkerRoom

GPU = Request(1, 0, 1)


def full_room(id_: str, gpus: int, tasks: list[RunningTask], cpu: float = 64) -> WorkerRoom:
    used = {g for t in tasks if t.worker_id == id_ for g in t.gpu_ids}
    cpu_used = sum(t.request.cpu for t in tasks if t.worker_id == id_)
    return WorkerRoom(id_, id_, cpu, 2**40, gpus, cpu - cpu_used, 2**40, [g for g in range(gpus) if g not in used])


def on(worker: str, task_id: int, gpus: tuple[int, ...], priority: int, *, job: int | None = None,
       since: float = 0.0, gang: bool = False, stopping: bool = False) -> RunningTask:
    return RunningTask(task_id, job if job is not None else task_id, worker, Request(1, 0, len(gpus)), gpus,
                       priority, since=since, gang=gang, stopping=stopping)


def victims_of(plan) -> list[int]:
    return sorted(t.task_id for t in plan.victims)


def test_evicts_the_fewest_tasks():
    running = [on("w1", 1, (0,), 0), on("w1", 2, (1,), 0), on("w2", 3, (0, 1), 0)]
    rooms = [full_room("w1", 2, running), full_room("w2", 2, running)]
    plan = choose_victims(Request(1, 0, 2), 1, 100, rooms, running)
    assert victims_of(plan) == [3]  # one task of two GPUs, not two of one


def test_then_the_lowest_priority():
    running = [on("w1", 1, (0,), 50), on("w2", 2, (0,), -100)]
    rooms = [full_room("w1", 1, running), full_room("w2", 1, running)]
    assert victims_of(choose_victims(GPU, 1, 100, rooms, running)) == [2]


def test_then_the_youngest_attempt():
    running = [on("w1", 1, (0,), 0, since=100.0), on("w2", 2, (0,), 0, since=500.0)]
    rooms = [full_room("w1", 1, running), full_room("w2", 1, running)]
    assert victims_of(choose_victims(GPU, 1, 100, rooms, running)) == [2]


def test_never_equal_or_higher_priority():
    running = [on("w1", 1, (0,), 100), on("w2", 2, (0,), 200)]
    rooms = [full_room("w1", 1, running), full_room("w2", 1, running)]
    assert choose_victims(GPU, 1, 100, rooms, running) is None


def test_nothing_is_evicted_for_a_job_that_would_still_not_fit():
    running = [on("w1", 1, (0,), 0)]
    rooms = [full_room("w1", 2, running, cpu=2)]
    rooms[0].free_gpu_ids = []  # the other GPU is held by a higher-priority task not listed as candidate
    assert choose_victims(Request(1, 0, 2), 1, 100, rooms, running) is None


def test_a_gang_victim_is_evicted_whole():
    running = [on("w1", 1, (0,), 0, job=7, gang=True), on("w2", 2, (0,), 0, job=7, gang=True)]
    rooms = [full_room("w1", 1, running), full_room("w2", 1, running)]
    plan = choose_victims(GPU, 1, 100, rooms, running)
    assert victims_of(plan) == [1, 2]


def test_a_gang_victim_frees_room_for_every_task_of_the_job_it_serves():
    running = [on("w1", 1, (0,), 0, job=7, gang=True), on("w2", 2, (0,), 0, job=7, gang=True)]
    rooms = [full_room("w1", 1, running), full_room("w2", 1, running)]
    plan = choose_victims(GPU, 2, 100, rooms, running)
    assert victims_of(plan) == [1, 2] and sorted(w for _, w in plan.placements) == ["w1", "w2"]


def test_stopping_tasks_are_not_chosen_again():
    running = [on("w1", 1, (0,), 0, stopping=True)]
    assert choose_victims(GPU, 1, 100, [full_room("w1", 1, running)], running) is None


def test_many_small_tasks_are_evicted_greedily_and_only_as_many_as_needed():
    running = [on("w1", i, (i,), 0, since=float(i)) for i in range(8)]
    plan = choose_victims(Request(1, 0, 5), 1, 100, [full_room("w1", 8, running)], running)
    assert len(plan.victims) == 5
    assert victims_of(plan) == [3, 4, 5, 6, 7]  # the youngest


# --- inside the pass --------------------------------------------------------------------------------


def test_the_pass_preempts_for_a_higher_priority_job_and_holds_the_room():
    running = [on("w1", 1, (0, 1), 0)]
    rooms = [full_room("w1", 2, running)]
    units = [Unit((5, 50), (50,), Request(1, 0, 2), priority=100), Unit((6, 60), (60,), Request(1, 0, 0))]
    result = place(units, rooms, running=running)
    assert result.waiting[(5, 50)] == Preempting(1, (1,))
    assert result.waiting[(5, 50)].sentence() == "preempting 1 lower-priority task (job 1) to make room"
    assert [t.task_id for t in result.victims[(5, 50)]] == [1]
    assert (6, 60) not in result.assignments  # the room being freed is held for job 5


def test_the_pass_waits_for_tasks_already_being_preempted():
    running = [on("w1", 1, (0, 1), 0, stopping=True)]
    units = [Unit((5, 50), (50,), Request(1, 0, 2), priority=100)]
    result = place(units, [full_room("w1", 2, running)], running=running)
    assert result.waiting[(5, 50)] == AwaitingPreempted(1)
    assert result.victims == {}


def test_no_preemption_cascade_within_a_pass():
    # Job 1 runs a low task and has a pending task of its own with priority 50 (above job 9's 10).
    running = [on("w1", 1, (0,), 10, job=1), on("w2", 2, (0,), 0, job=9)]
    rooms = [full_room("w1", 1, running), full_room("w2", 1, running)]
    units = [Unit((3, 30), (30,), GPU, priority=100), Unit((1, 11), (11,), GPU, priority=10)]
    result = place(units, rooms, running=running)
    assert [t.job_id for t in result.victims[(3, 30)]] == [9]  # the cheapest: priority 0
    units = [Unit((3, 30), (30,), Request(1, 0, 2), priority=100), Unit((9, 91), (91,), GPU, priority=5)]
    running = [on("w1", 1, (0,), 0, job=9), on("w1", 2, (1,), 0, job=9)]
    rooms = [full_room("w1", 2, running)]
    result = place(units, rooms, running=running)
    assert {t.job_id for t in result.victims[(3, 30)]} == {9}
    assert (9, 91) not in result.victims  # job 9 was just preempted: it preempts no one in this pass


def test_fifo_and_fair_share_pools_do_not_preempt():
    running = [on("w1", 1, (0,), 0)]
    for sequencer in (Sequencer.FIFO, Sequencer.FAIR_SHARE):
        policy = Policy(pools={"default": PoolPolicy(sequencer=sequencer)})
        result = place([Unit((5, 50), (50,), GPU, priority=100)], [full_room("w1", 1, running)], policy=policy,
                       running=running)
        assert isinstance(result.waiting[(5, 50)], NoRoom) and result.victims == {}


# --- properties --------------------------------------------------------------------------------------


@st.composite
def clusters(draw):
    n_workers = draw(st.integers(1, 4))
    running, task_id = [], 0
    rooms = []
    for w in range(n_workers):
        gpus = draw(st.integers(1, 8))
        free = list(range(gpus))
        worker = f"w{w}"
        while free and draw(st.booleans()):
            take = draw(st.integers(1, len(free)))
            ids, free = tuple(free[:take]), free[take:]
            gang_job = draw(st.sampled_from([None, 900, 901]))
            running.append(RunningTask(task_id, gang_job if gang_job is not None else task_id, worker,
                                       Request(0, 0, take), ids, draw(st.integers(-3, 3)),
                                       since=draw(st.floats(0, 100)), gang=gang_job is not None))
            task_id += 1
        rooms.append(WorkerRoom(worker, worker, 64, 2**40, gpus, 64, 2**40, free))
    # A gang job's tasks share its priority.
    by_job = {}
    running = [t if not t.gang else RunningTask(t.task_id, t.job_id, t.worker_id, t.request, t.gpu_ids,
                                                by_job.setdefault(t.job_id, t.priority), since=t.since, gang=True)
               for t in running]
    request = Request(0, 0, draw(st.integers(1, 8)))
    return rooms, running, request, draw(st.integers(1, 3)), draw(st.integers(-3, 4))


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_preemption_never_evicts_equal_or_higher_priority_and_always_frees_enough(cluster):
    rooms, running, request, tasks, priority = cluster
    plan = choose_victims(request, tasks, priority, rooms, running)
    if plan is None:
        return
    assert all(t.priority < priority for t in plan.victims)
    victim_ids = {t.task_id for t in plan.victims}
    gang_jobs = {t.job_id for t in plan.victims if t.gang}
    assert all(t.task_id in victim_ids for t in running if t.gang and t.job_id in gang_jobs), "gang split"
    # With the victims gone, the planned placement is real: every task fits where the plan puts it.
    freed = {room.id: room.copy() for room in rooms}
    for t in plan.victims:
        freed[t.worker_id].give(t.request, t.gpu_ids)
    assert len(plan.placements) == tasks
    for _, worker in plan.placements:
        assert freed[worker].fits(request)
        freed[worker].take(request)
    # And the whole pass places it once the victims are gone.
    unit = Unit((1, None), tuple(range(tasks)), request, priority=priority)
    assert (1, None) in place([unit], list(freed_rooms(rooms, plan.victims))).assignments


def freed_rooms(rooms, victims):
    copies = {room.id: room.copy() for room in rooms}
    for t in victims:
        copies[t.worker_id].give(t.request, t.gpu_ids)
    return copies.values()


@st.composite
def busy_clusters(draw):
    rooms, running, _, _, _ = draw(clusters())
    units = []
    for j in range(draw(st.integers(1, 5))):
        n = draw(st.integers(1, 2))
        key = (100 + j, None) if n > 1 else (100 + j, 1000 + j)
        units.append(Unit(key, tuple(range(1000 + 10 * j, 1000 + 10 * j + n)), Request(0, 0, draw(st.integers(1, 4))),
                          priority=draw(st.integers(-3, 4))))
    return rooms, running, units


@settings(max_examples=300, deadline=None)
@given(busy_clusters())
def test_a_pass_preempts_only_lower_priority_each_victim_once_and_never_for_a_placed_job(cluster):
    rooms, running, units = cluster
    result = place(units, rooms, running=running)
    seen: set[int] = set()
    by_key = {u.key: u for u in units}
    for key, victims in result.victims.items():
        assert key in result.waiting and key not in result.assignments
        assert isinstance(result.waiting[key], Preempting | Moving)  # a move is a preemption that re-fits
        assert all(t.priority < by_key[key].priority for t in victims)
        ids = {t.task_id for t in victims}
        assert not ids & seen, "a task evicted twice"
        seen |= ids
