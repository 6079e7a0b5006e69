"""The job handlers' declarations and each handler's pure `execute` (the tables: test_states.py)."""

from __future__ import annotations

import pytest

from corral.core.lifecycle import DERIVED, SchedulingResult, Target, TaskView, TransitionStatus, judge
from corral.core.states import TASK_TERMINAL, JobState, TaskState
from corral.engine.effects import Doom, Place, Preempt
from corral.engine.handlers import (
    JOB_HANDLERS,
    DetectTermination,
    JobFacts,
    PrepareJobs,
    PromoteToPrepared,
    PromoteToRunning,
    PromoteToTerminated,
    ScheduleJobs,
    Snapshot,
    StartJobs,
    TerminateJobs,
)
from corral.scheduling.placement import Request, WorkerRoom
from corral.scheduling.snapshot import ClusterSnapshot, JobEnd, JobPlacement

J, T = JobState, TaskState
GiB = 2**30


def ts(job=None, task=None):
    return TransitionStatus(job=job, task=task)


BY_NAME = {h.name: h for h in JOB_HANDLERS}


# --- the declared tables ---------------------------------------------------------------------------


def test_who_acts_on_independent_jobs():
    # Gang-only handlers act on whole gangs; TerminateJobs and PromoteToTerminated on every job.
    assert {h.name for h in JOB_HANDLERS if not h.gang_only} == {"TerminateJobs", "PromoteToTerminated",
                                                                "CancelLaunched"}
    assert {h.name for h in JOB_HANDLERS if h.launcher_states} == {"CancelLaunched"}
    assert {h.name for h in JOB_HANDLERS if h.needs_rooms} == {"ScheduleJobs"}


def test_no_generic_timeouts():
    # ScheduleJobs judges its scheduling timeout itself: the clock starts once the job may start.
    facts = JobFacts(Request(1, 0, 0), 0, scheduling_timeout=300.0)
    # The drain timeout: the job's grace period plus 30 s.
    assert BY_NAME["ForceDrain"].timeout(facts) == 45.0
    assert BY_NAME["ForceDrain"].timeout(JobFacts(Request(1, 0, 0), 0, None, grace_period=2.0)) == 32.0
    for handler in JOB_HANDLERS:
        if handler.name != "ForceDrain":
            assert handler.timeout(facts) is None, handler.name


def test_only_schedule_jobs_and_complete_drain_give_up_and_at_once():
    # A scheduling timeout and a drain's FAILED verdict are final: their failures give up on the first try.
    assert {h.name: h.max_tries for h in JOB_HANDLERS if h.max_tries is not None} == {
        "ScheduleJobs": 0, "CompleteDrain": 0}


def test_schedule_gives_up_past_the_scheduling_timeout_with_the_last_reason():
    targets = [one_task(4, 40), one_task(5, 50)]
    snap = Snapshot(NOW + 31, {4: JobFacts(Request(64, 0, 0), 0, 30.0), 5: JobFacts(Request(64, 0, 0), 0, 60.0)},
                    ClusterSnapshot(rooms=[room("w1", 2)]))
    decision = ScheduleJobs().execute(targets, snap)
    assert decision.result.failures == [(4, 40)] and decision.result.skipped == [(5, 50)]
    assert decision.result.notes[(4, 40)].startswith("not placed within its scheduling timeout (30s); last reason: ")
    outcome, = [o for o in judge(targets, decision.result, ScheduleJobs.transitions, now=NOW + 31, max_tries=0)
                if o.target.key == (4, 40)]
    assert outcome.result is SchedulingResult.GIVE_UP
    assert outcome.transition == ScheduleJobs.transitions.give_up


def test_schedule_timeout_counts_from_when_the_dependencies_ended():
    target = one_task(6, 60)
    cluster = ClusterSnapshot(rooms=[room("w1", 2)], jobs={6: JobPlacement(after=(1,))},
                              dependencies={1: JobEnd("SUCCEEDED", NOW + 100)})
    snap = Snapshot(NOW + 110, {6: JobFacts(Request(64, 0, 0), 0, 30.0)}, cluster)
    assert ScheduleJobs().execute([target], snap).result.skipped == [(6, 60)]
    snap.now = NOW + 131
    assert ScheduleJobs().execute([target], snap).result.failures == [(6, 60)]


def test_schedule_dooms_a_job_whose_dependency_failed_and_waits_on_a_running_one():
    cluster = ClusterSnapshot(rooms=[room("w1", 2)], jobs={6: JobPlacement(after=(1,)), 7: JobPlacement(after=(2,))},
                              dependencies={1: JobEnd("FAILED", NOW), 2: JobEnd("RUNNING")})
    snap = Snapshot(NOW, {6: JobFacts(Request(1, 0, 0), 0, None), 7: JobFacts(Request(1, 0, 0), 0, None)}, cluster)
    decision = ScheduleJobs().execute([one_task(6, 60), one_task(7, 70)], snap)
    assert decision.of(Doom) == [Doom(6, "dependency job 1 ended FAILED; this job cannot run")]
    assert decision.result.skipped == [(7, 70)]
    assert decision.result.notes[(7, 70)] == "waiting for job 2 to succeed (now RUNNING)"
    assert decision.of(Place) == []


def test_each_success_feeds_the_next_handler():
    """A gang's job state after each handler's success is a state some later handler acts on."""
    for handler in JOB_HANDLERS:
        after = handler.transitions.success.job if handler.transitions.success else None
        if after is None or after is DERIVED:
            continue
        assert any(after in h.job_states for h in JOB_HANDLERS), handler.name


# --- execute over hand-built targets ---------------------------------------------------------------

NOW = 1000.0


def gang(job_id: int, *states: TaskState, job_state: str = "PENDING", since: float = NOW) -> Target:
    tasks = tuple(TaskView(id=job_id * 100 + i, index=i, state=s) for i, s in enumerate(states))
    return Target(job_id, True, job_state, since, 0, tasks)


def one_task(job_id: int, task_id: int, state: TaskState = T.PENDING, index: int = 0) -> Target:
    return Target(job_id, False, str(state), NOW, 0, (TaskView(task_id, index, state),))


def room(id_: str, cpu: float, memory: int = 64 * GiB, gpus: int = 0, name: str | None = None) -> WorkerRoom:
    return WorkerRoom(id_, name or id_, cpu, memory, gpus, cpu, memory, list(range(gpus)))


def snapshot(rooms, **requests: Request) -> Snapshot:
    jobs = {int(k[1:]): JobFacts(r, 0, None) for k, r in requests.items()}
    return Snapshot(NOW, jobs, ClusterSnapshot(rooms=list(rooms)))


def test_schedule_places_a_gang_whole():
    target = gang(1, T.PENDING, T.PENDING)
    snap = snapshot([room("w1", 4, gpus=2), room("w2", 4, gpus=2)], j1=Request(2, GiB, 2))
    decision = ScheduleJobs().execute([target], snap)
    assert decision.result.successes == [(1, None)]
    assert decision.result.skipped == [] and decision.result.failures == []
    assert sorted((a.task_id, a.worker_id, a.gpu_ids) for a in decision.of(Place)) == [
        (100, "w1", (0, 1)), (101, "w2", (0, 1)),
    ]
    # The snapshot's rooms are not consumed by a decision.
    assert snap.cluster.rooms[0].free_gpu_ids == [0, 1] and snap.cluster.rooms[0].free_cpu == 4


def test_schedule_skips_a_gang_when_only_one_fits():
    target = gang(1, T.PENDING, T.PENDING)
    snap = snapshot([room("w1", 4, gpus=2, name="node-a"), room("w2", 4, gpus=1)], j1=Request(2, GiB, 2))
    decision = ScheduleJobs().execute([target], snap)
    assert decision.result.successes == []
    assert decision.result.skipped == [(1, None)]
    assert decision.of(Place) == []
    note = decision.result.notes[(1, None)]
    assert "gang of 2" in note and "only 1 fit now" in note and "node-a" in note
    # Judged: SKIPPED, no state change; with its scheduling timeout passed it would expire.
    outcome, = judge([target], decision.result, ScheduleJobs.transitions, now=NOW, max_tries=None)
    assert (outcome.result, outcome.transition, outcome.note) == (SchedulingResult.SKIPPED, None, note)


def test_schedule_places_only_pending_tasks_of_a_gang():
    target = gang(1, T.PENDING, T.ASSIGNED, T.PENDING)
    decision = ScheduleJobs().execute([target], snapshot([room("w1", 8)], j1=Request(1, 0, 0)))
    assert sorted(a.task_id for a in decision.of(Place)) == [100, 102]


def test_schedule_places_independent_tasks_as_room_allows():
    targets = [one_task(3, 30 + i, index=i) for i in range(3)]
    snap = snapshot([room("w1", 2, name="alpha")], j3=Request(1, GiB, 0))
    decision = ScheduleJobs().execute(targets, snap)
    assert decision.result.successes == [(3, 30), (3, 31)]
    assert decision.result.skipped == [(3, 32)]
    assert [(a.task_id, a.worker_id) for a in decision.of(Place)] == [(30, "w1"), (31, "w1")]
    assert set(decision.result.notes) == {(3, 32)}
    note = decision.result.notes[(3, 32)]
    assert note == "needs 1 cpu on one worker; no worker has any cpu free"


def test_schedule_notes_a_task_no_worker_can_hold():
    targets = [one_task(4, 40)]
    decision = ScheduleJobs().execute(targets, snapshot([room("w1", 2)], j4=Request(64, 0, 0)))
    assert decision.result.skipped == [(4, 40)]
    assert decision.result.notes[(4, 40)] == (
        "needs 64 cpu per task; no worker has that much (largest: 2 cpu on w1); waiting for one to join")


def test_schedule_with_no_workers():
    decision = ScheduleJobs().execute([gang(1, T.PENDING)], snapshot([], j1=Request(1, 0, 0)))
    assert decision.result.skipped == [(1, None)]
    assert decision.result.notes[(1, None)] == "no worker is alive; waiting for one to register"


def test_prepare_and_start_succeed_every_target():
    targets = [gang(1, T.ASSIGNED, T.ASSIGNED, job_state="SCHEDULED"), gang(2, T.ASSIGNED, job_state="SCHEDULED")]
    assert PrepareJobs().execute(targets, Snapshot(NOW)).result.successes == [(1, None), (2, None)]
    starts = [gang(1, T.PREPARED, T.PREPARED, job_state="PREPARED"), one_task(5, 50, T.PREPARED)]
    assert StartJobs().execute(starts, Snapshot(NOW)).result.successes == [(1, None), (5, 50)]
    assert PrepareJobs().execute([], Snapshot(NOW)).result.successes == []


@pytest.mark.parametrize(("states", "promoted"), [
    ((T.PREPARED, T.PREPARED), True),
    ((T.PREPARED, T.BUILDING), False),
    ((T.PREPARED, T.ASSIGNED), False),
    ((T.PENDING, T.PREPARED), False),
    ((T.PREPARED, T.STARTING), True),
    ((T.PREPARED, T.FAILED), True),  # a failed member is DetectTermination's business
])
def test_promote_to_prepared(states, promoted):
    target = gang(1, *states, job_state="PREPARING")
    assert PromoteToPrepared().execute([target], Snapshot(NOW)).result.successes == ([(1, None)] if promoted else [])


@pytest.mark.parametrize(("states", "promoted"), [
    ((T.RUNNING, T.RUNNING), True),
    ((T.RUNNING, T.STARTING), False),
    ((T.PREPARED, T.RUNNING), False),
    ((T.RUNNING, T.SUCCEEDED), True),
])
def test_promote_to_running(states, promoted):
    target = gang(1, *states, job_state="STARTING")
    assert PromoteToRunning().execute([target], Snapshot(NOW)).result.successes == ([(1, None)] if promoted else [])


@pytest.mark.parametrize(("states", "triggered"), [
    ((T.RUNNING, T.RUNNING), False),
    ((T.SUCCEEDED, T.RUNNING), False),  # ranks end at slightly different times
    ((T.SUCCEEDED, T.SUCCEEDED), True),
    ((T.FAILED, T.RUNNING), True),
    ((T.KILLED, T.RUNNING), True),
    ((T.WORKER_FAILED, T.RUNNING), True),
    ((T.PREEMPTED, T.RUNNING), True),
    ((T.SUCCEEDED, T.FAILED), True),
    ((T.UNSCHEDULABLE, T.PENDING), True),
])
def test_detect_termination(states, triggered):
    target = gang(1, *states, job_state="RUNNING")
    assert DetectTermination().execute([target], Snapshot(NOW)).result.successes == ([(1, None)] if triggered else [])


def test_detect_termination_over_several_gangs():
    targets = [gang(1, T.SUCCEEDED, T.RUNNING, job_state="RUNNING"),
               gang(2, T.FAILED, T.RUNNING, job_state="RUNNING"),
               gang(3, T.RUNNING, T.RUNNING, job_state="RUNNING"),
               gang(4, T.WORKER_FAILED, T.BUILDING, job_state="PREPARING")]
    assert DetectTermination().execute(targets, Snapshot(NOW)).result.successes == [(2, None), (4, None)]


def test_terminate_selects_only_jobs_with_stoppable_tasks():
    targets = [
        gang(1, T.RUNNING, T.SUCCEEDED, job_state="TERMINATING"),
        gang(2, T.TERMINATING, T.KILLED, job_state="TERMINATING"),  # already told
        gang(3, T.PENDING, T.FAILED, job_state="TERMINATING"),  # nothing placed
        gang(4, T.ASSIGNED, job_state="TERMINATING"),
        gang(5, T.BUILDING, job_state="TERMINATING"),
        gang(6, T.PREPARED, job_state="TERMINATING"),
        gang(7, T.STARTING, job_state="TERMINATING"),
        gang(8, T.PREEMPTING, job_state="TERMINATING"),  # already stopping for a preemption
        gang(9, T.SUCCEEDED, T.WORKER_FAILED, job_state="TERMINATING"),
    ]
    assert TerminateJobs().execute(targets, Snapshot(NOW)).result.successes == [
        (1, None), (4, None), (5, None), (6, None), (7, None),
    ]
    assert TerminateJobs.stoppable == {T.ASSIGNED, T.BUILDING, T.PREPARED, T.STARTING, T.RUNNING}


@pytest.mark.parametrize(("states", "done"), [
    ((T.KILLED, T.SUCCEEDED), True),
    ((T.KILLED, T.TERMINATING), False),
    ((T.PREEMPTING, T.FAILED), False),
    ((T.PENDING,), False),
    ((), True),
])
def test_promote_to_terminated(states, done):
    target = gang(1, *states, job_state="TERMINATING")
    assert PromoteToTerminated().execute([target], Snapshot(NOW)).result.successes == ([(1, None)] if done else [])


def test_promote_to_terminated_check_is_complement_of_terminal():
    assert PromoteToTerminated.check | TASK_TERMINAL == set(TaskState)
    assert PromoteToTerminated.check & TASK_TERMINAL == set()



def test_schedule_evicts_for_a_waiting_job_but_not_for_one_that_gives_up():
    from corral.scheduling.preemption import RunningTask

    running = [RunningTask(900, 90, "w1", Request(2, 0, 0), (), 0), RunningTask(901, 91, "w2", Request(2, 0, 0), (), 0)]
    rooms = [WorkerRoom("w1", "w1", 2, GiB, 0, 0, GiB, []), WorkerRoom("w2", "w2", 2, GiB, 0, 0, GiB, [])]
    cluster = ClusterSnapshot(rooms=rooms, running=running,
                              jobs={6: JobPlacement(priority=100), 7: JobPlacement(priority=100)})
    facts = {6: JobFacts(Request(2, 0, 0), 0, None), 7: JobFacts(Request(2, 0, 0), 0, 30.0)}
    decision = ScheduleJobs().execute([one_task(6, 60), one_task(7, 70)], Snapshot(NOW + 31, facts, cluster))
    assert decision.result.skipped == [(6, 60)] and decision.result.failures == [(7, 70)]
    assert [effect.victim.task_id for effect in decision.of(Preempt)] == [900]
    assert decision.result.notes[(6, 60)] == "preempting 1 lower-priority task (job 90) to make room"
