from corral.cli.events import event_line
from corral.core.views import EventView


def event(**changes) -> EventView:
    fields = dict(id=41, type="task.state_changed", at=0.0, job_id=7, task_id=70, task_index=0, attempt=1,
                  worker_id="w1-abc", handler="Worker", result="SUCCESS", from_state="RUNNING",
                  to_state="SUCCEEDED", message="exit code 0")
    return EventView(**{**fields, **changes})


def test_a_task_event_names_its_job_task_attempt_worker_and_move():
    line = event_line(event()).plain
    assert line.endswith("#41 task.state_changed job 7 task 0#1 worker w1-abc RUNNING -> SUCCEEDED (Worker) "
                         "exit code 0")


def test_a_worker_event_has_no_job_and_a_judged_wait_shows_its_result():
    lost = event_line(event(type="worker.lost", job_id=None, task_id=None, task_index=None, attempt=None,
                            handler="Reaper", from_state="ALIVE", to_state="LOST", message=None)).plain
    assert lost.endswith("#41 worker.lost worker w1-abc ALIVE -> LOST (Reaper)")
    wait = event_line(event(type="job.skipped", task_id=None, task_index=None, attempt=None, worker_id=None,
                            handler="ScheduleJobs", result="SKIPPED", from_state="PENDING", to_state=None,
                            message="needs 8 GPUs")).plain
    assert wait.endswith("#41 job.skipped job 7 (ScheduleJobs, SKIPPED) needs 8 GPUs")


def test_a_replica_event_names_its_deployment_and_replica():
    evicted = event_line(event(type="replica.evicted", job_id=None, task_id=None, task_index=None, attempt=None,
                               worker_id=None, deployment_id=3, deployment="svc", replica_id=12,
                               handler="ReplicaEviction", from_state="UNHEALTHY", to_state="TERMINATING",
                               message="evicted, to be replaced: health check failed 3 times: 503 from /health")).plain
    assert evicted.endswith("#41 replica.evicted deployment svc replica 12 UNHEALTHY -> TERMINATING "
                            "(ReplicaEviction) evicted, to be replaced: health check failed 3 times: 503 from /health")
