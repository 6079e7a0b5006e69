"""The scheduling policy over the real store: dependencies, begin times, timeouts, quotas, pools, retries."""

from __future__ import annotations

from sqlalchemy import event

from corral.controller.admission import refusal
from corral.controller.submit_settings import SubmitSettings
from corral.core.config import CorralConfig, PoolPolicy, ProjectQuota
from corral.core.spec import JobSpec
from corral.engine.coordinator import run_handler
from corral.engine.handlers import ScheduleJobs
from corral.store.policy import apply_policy_file, put_quota, read_policy
from corral.store.scheduling_reads import KeptCapacity, read_cluster
from tests.store.helpers import NOW, add_worker, job, job_history, job_tasks, report, run_task, settle, submit

SCHEDULE = ScheduleJobs()


async def test_after_waits_for_success_then_starts(store):
    worker = await add_worker(store, cpu=2)
    first = await submit(store)
    second = await submit(store, after=[first])
    await settle(store)
    assert (await job(store, second)).pending_reason == f"waiting for job {first} to succeed (now RUNNING)"
    (task,) = await job_tasks(store, first)
    await run_task(store, worker, task)
    assert [t.state for t in await job_tasks(store, second)] == ["ASSIGNED"]


async def test_a_failed_dependency_fails_the_waiting_job_with_the_cause(store):
    worker = await add_worker(store, cpu=2)
    first = await submit(store)
    second = await submit(store, after=[first], replicas=2)
    gang = await submit(store, after=[first], replicas=2, gang=True)
    anyway = await submit(store, after_any=[first])
    await settle(store)
    (task,) = await job_tasks(store, first)
    await run_task(store, worker, task, exit_code=3)
    assert (await job(store, first)).state == "FAILED"
    for waiting in (second, gang):
        assert (await job(store, waiting)).state == "FAILED"
        assert {t.state for t in await job_tasks(store, waiting)} == {"KILLED"}
        messages = [h.message for h in await job_history(store, waiting)]
        assert f"dependency job {first} ended FAILED; this job cannot run" in messages
    assert [t.state for t in await job_tasks(store, anyway)] == ["ASSIGNED"]  # after-any runs regardless


async def test_begin_time_holds_a_job_back(store):
    await add_worker(store)
    job_id = await submit(store, begin=NOW + 60)
    await settle(store)
    assert (await job(store, job_id)).pending_reason.startswith("not before ")
    await settle(store, now=NOW + 61)
    assert [t.state for t in await job_tasks(store, job_id)] == ["ASSIGNED"]


async def test_past_its_scheduling_timeout_a_job_is_unschedulable_and_keeps_its_reason(store):
    await add_worker(store, gpu=8)
    single = await submit(store, resources={"gpu": 200}, scheduling_timeout=2)
    gang = await submit(store, resources={"gpu": 8}, scheduling_timeout=2, gang=True, replicas=125)  # 1000 GPUs
    await settle(store)
    await settle(store, now=NOW + 3)
    expected = {single: "needs 200 gpu per task; no worker has that much (largest: 8 gpu on w0)",
                gang: "gang of 125 needs 8 gpu per task; only 1 fit now; most free on one worker: 8 gpu (w0)"}
    for job_id, reason in expected.items():
        row = await job(store, job_id)
        assert row.state == "UNSCHEDULABLE"
        assert row.pending_reason.startswith(f"not placed within its scheduling timeout (2s); last reason: {reason}")
        assert {t.state for t in await job_tasks(store, job_id)} == {"UNSCHEDULABLE"}


async def test_the_timeout_does_not_run_while_a_dependency_does(store):
    worker = await add_worker(store, cpu=1)
    first = await submit(store)
    second = await submit(store, after=[first], scheduling_timeout=5)
    await settle(store)
    await settle(store, now=NOW + 100)
    assert (await job(store, second)).state == "PENDING"
    (task,) = await job_tasks(store, first)
    await run_task(store, worker, task)
    assert [t.state for t in await job_tasks(store, second)] == ["ASSIGNED"]


async def test_a_project_over_quota_waits_until_its_jobs_end(store):
    worker = await add_worker(store, gpu=8, cpu=8)
    async with store.write() as connection:
        await put_quota(connection, "vision", ProjectQuota(limits={"gpu": 2}), NOW)
    first = await submit(store, project="vision", resources={"gpu": 2})
    second = await submit(store, project="vision", resources={"gpu": 1})
    other = await submit(store, project="nlp", resources={"gpu": 4})
    await settle(store)
    assert (await job(store, second)).pending_reason == "over project quota: gpu 2/2 (project vision asks 1 gpu more)"
    assert [t.state for t in await job_tasks(store, other)] == ["ASSIGNED"]
    (task,) = await job_tasks(store, first)
    await run_task(store, worker, task)
    assert [t.state for t in await job_tasks(store, second)] == ["ASSIGNED"]


async def test_pools_labels_and_custom_slots_come_from_registration(store):
    await add_worker(store, "cpu-box", cpu=8)
    h100 = await add_worker(store, "h100-box", gpu=8, pool="gpu", labels={"gpu": "h100"}, custom={"nvlink": 1})
    placed = await submit(store, pool="gpu", constraints=["gpu=h100"], resources={"gpu": 2, "custom": {"nvlink": 1}})
    wrong_label = await submit(store, pool="gpu", constraints=["gpu=a100"])
    no_pool = await submit(store, pool="tpu")
    await settle(store)
    assert [t.worker_id for t in await job_tasks(store, placed)] == [h100]
    assert (await job(store, wrong_label)).pending_reason == "no worker in pool gpu matches constraint gpu=a100"
    assert (await job(store, no_pool)).pending_reason == "no alive worker in pool tpu; waiting for one to join"


async def test_a_retried_task_goes_to_another_worker(store):
    first = await add_worker(store, "w1", cpu=1)
    second = await add_worker(store, "w2", cpu=1)
    job_id = await submit(store, max_retries_failure=1)
    await settle(store)
    (task,) = await job_tasks(store, job_id)
    assert task.worker_id == first
    await report(store, first, (task.id, task.attempt, "BUILDING"), (task.id, task.attempt, "PREPARED"))
    await settle(store)
    await report(store, first, (task.id, task.attempt, "RUNNING"), (task.id, task.attempt, "FAILED", 1))
    await settle(store)
    (task,) = await job_tasks(store, job_id)
    assert (task.state, task.worker_id) == ("ASSIGNED", second)


async def test_only_a_run_with_a_retried_task_reads_where_attempts_failed(store):
    """A task's attempt counts up as it goes back to the queue, so only a pending task past its first attempt can have
    failed on a worker: a placing run of new tasks reads no attempts; one with a retried task reads its own."""
    first = await add_worker(store, "w1", cpu=1)
    second = await add_worker(store, "w2", cpu=1)
    statements: list[str] = []
    listen = lambda conn, cursor, statement, *rest: statements.append(" ".join(statement.split()))  # noqa: E731
    event.listen(store.writer.sync_engine, "before_cursor_execute", listen)
    try:
        job_id = await submit(store, max_retries_failure=1)
        statements.clear()
        await run_handler(store, SCHEDULE, NOW)
        assert statements and not [s for s in statements if s.startswith("SELECT") and "FROM attempts" in s]
        (task,) = await job_tasks(store, job_id)
        assert task.worker_id == first
        await report(store, first, (task.id, task.attempt, "BUILDING"), (task.id, task.attempt, "PREPARED"))
        await settle(store)
        await report(store, first, (task.id, task.attempt, "RUNNING"), (task.id, task.attempt, "FAILED", 1))
        statements.clear()
        await settle(store)
        assert [s for s in statements if s.startswith("SELECT") and "FROM attempts" in s]
    finally:
        event.remove(store.writer.sync_engine, "before_cursor_execute", listen)
    (task,) = await job_tasks(store, job_id)
    assert (task.state, task.attempt, task.worker_id) == ("ASSIGNED", 1, second)


async def test_admission_refuses_over_a_pool_maximum_and_unknown_dependencies(store):
    settings = SubmitSettings()
    async with store.write() as connection:
        await apply_policy_file(connection, CorralConfig(pools={"a100": PoolPolicy(max_per_job={"gpu": 16})}), NOW)
        two, three = (JobSpec(command=["x"], pool="a100", replicas=n, resources={"gpu": 8}) for n in (2, 3))
        assert await refusal(connection, two, settings) is None
        assert await refusal(connection, three, settings) == (
            "pool a100: the job asks 24 gpu in total; the pool allows at most 16 per job")
        # A job larger than any worker present is not refused: workers may join.
        assert await refusal(connection, JobSpec(command=["x"], resources={"gpu": 256}), settings) is None
        assert await refusal(connection, JobSpec(command=["x"], after=[4242]), settings) == (
            "no job 4242 to wait for (after / after_any name existing jobs)")


async def test_the_config_file_wins_for_what_it_names_and_keeps_the_rest(store):
    async with store.write() as connection:
        await put_quota(connection, "kept", ProjectQuota(limits={"cpu": 4}), NOW)
        await apply_policy_file(connection, CorralConfig(
            pools={"a100": PoolPolicy(strategy="dispersed", reservation_time="10m")},
            quotas={"vision": ProjectQuota(limits={"gpu": 8, "memory": "64G"})}), NOW)
        await apply_policy_file(connection, CorralConfig(quotas={"vision": ProjectQuota(limits={"gpu": 4})}), NOW)
        policy = await read_policy(connection)
    assert policy.pool("a100").strategy == "dispersed" and policy.pool("a100").reservation_time == 600
    assert policy.pool("other") == PoolPolicy()
    assert policy.quotas == {"kept": {"cpu": 4}, "vision": {"gpu": 4}}
    async with store.read() as connection:  # a placing run reads them in one statement: the same policy
        assert (await read_cluster(connection)).policy == policy
        assert (await read_cluster(connection, KeptCapacity())).policy == policy


async def test_custom_slots_held_by_placed_tasks_are_not_offered_again(store):
    worker = await add_worker(store, "tpu-box", cpu=8, custom={"tpu": 4})
    first = await submit(store, resources={"custom": {"tpu": 3}})
    second = await submit(store, resources={"custom": {"tpu": 2}})
    await settle(store)
    assert [t.worker_id for t in await job_tasks(store, first)] == [worker]
    assert (await job(store, second)).pending_reason == (
        "needs 2 tpu on one worker; most free on one worker: 1 tpu (tpu-box)")
    (task,) = await job_tasks(store, first)
    await run_task(store, worker, task)
    assert [t.state for t in await job_tasks(store, second)] == ["ASSIGNED"]


async def test_gpu_memory_reaches_the_snapshot_from_the_spec_and_the_reported_devices(store):
    GB = 10**9
    worker = await add_worker(store, "gpu-box", cpu=8, gpu=3, gpu_memory=(80 * GB, 24 * GB, 80 * GB))
    big = await submit(store, resources={"gpu": 1, "gpu_memory": "40G"})
    too_big = await submit(store, resources={"gpu": 1, "gpu_memory": "100G"})
    await settle(store)
    assert [t.gpu_ids for t in await job_tasks(store, big)] == [[0]]
    assert (await job(store, too_big)).pending_reason == (
        "needs 1 gpu with at least 100G memory per task; no worker has that much "
        "(largest: gpu-box has 1 gpu of 24G, 2 gpu of 80G); waiting for one to join")
    async with store.read() as connection:
        cluster = await read_cluster(connection)
    (room,) = cluster.rooms
    assert (room.id, tuple(room.gpu_memory), room.free_gpu_ids) == (worker, (80 * GB, 24 * GB, 80 * GB), [1, 2])
    (running,) = cluster.running
    assert running.request.gpu_memory == cluster.jobs[big].gpu_memory == 40 * GB
