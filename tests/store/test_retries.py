"""RetryJobs over a real store (both backends): the chain, its due times, exactly-once dispatch."""

from __future__ import annotations

import asyncio

from sqlalchemy import select

from corral.core.failure import classify_failure as classify
from corral.core.protocol import TaskReport
from corral.core.retry_policy import FailureCause, RetryPolicy
from corral.core.spec import JobSpec
from corral.engine.cancel import cancel_job
from corral.engine.reports import ingest_heartbeat
from corral.engine.retries import run_retries
from corral.metrics import REGISTRY
from corral.store.jobs import insert_job
from corral.store.retries import chain_ids, retry_targets, store_default
from corral.store.schema import audit, jobs
from corral.store.store import Store
from tests.store.helpers import (
    NOW,
    add_worker,
    job,
    job_history,
    job_tasks,
    reap,
    report,
    retry_columns_now,
    run_task,
    settle,
)

POLICY = {"max_retries": 2, "retry_delay": 5, "jitter": "none"}


async def submit(store, key=None, config_default=None, owner="admin", **spec) -> int:
    spec = JobSpec(**{"command": ["false"], **spec})
    async with store.write() as connection:
        return await insert_job(connection, spec, key, NOW, owner=owner,
                                **await retry_columns_now(connection, spec, config_default))


async def fail(store, worker, job_id, exit_code=1):
    await settle(store)
    (task,) = await job_tasks(store, job_id)
    await run_task(store, worker, task, exit_code=exit_code)
    assert (await job(store, job_id)).state == ("FAILED" if exit_code else "SUCCEEDED")


async def children(store, job_id) -> list:
    async with store.read() as connection:
        return (await connection.execute(select(jobs).where(jobs.c.parent_job_id == job_id))).all()


def counter(name, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_a_failed_job_is_retried_after_its_delay_as_a_child_then_exhausted(store):
    worker = await add_worker(store)
    first = await submit(store, key="nightly", owner="alice", retry_policy=POLICY)
    scheduled = counter("corral_job_retry_scheduled_total", cause="nonzero_exit")
    await fail(store, worker, first)

    report = await run_retries(store, NOW)
    assert report.changed and report.created == [] and report.next_due == NOW + 5
    row = await job(store, first)
    assert (row.retry_state, row.retry_cause, row.retry_due_at) == ("scheduled", "nonzero_exit", NOW + 5)
    assert counter("corral_job_retry_scheduled_total", cause="nonzero_exit") == scheduled + 1

    assert (await run_retries(store, NOW + 4.99)).created == []
    (second,) = (await run_retries(store, NOW + 5)).created
    assert (await run_retries(store, NOW + 5)).created == []  # a replayed pass creates nothing
    child = await job(store, second)
    assert (child.parent_job_id, child.retry_root_id, child.retry_count, child.max_retries, child.retry_cause,
            child.idempotency_key, child.state) == (first, first, 1, 2, "nonzero_exit", "nightly:retry:1", "PENDING")
    assert child.spec == row.spec and child.retry_policy == row.retry_policy
    assert child.owner == "alice"  # a retry is its parent's owner's: its usage and its rights stay theirs
    assert (await job(store, first)).retry_state == "retried"

    await fail(store, worker, second)
    await run_retries(store, NOW)
    (third,) = (await run_retries(store, NOW + 5)).created
    assert (await job(store, third)).idempotency_key == "nightly:retry:2"
    await fail(store, worker, third)
    exhausted = counter("corral_job_retry_exhausted_total", cause="nonzero_exit")
    assert (await run_retries(store, NOW + 100)).created == []
    assert (await job(store, third)).retry_state == "exhausted"
    assert counter("corral_job_retry_exhausted_total", cause="nonzero_exit") == exhausted + 1

    async with store.read() as connection:
        assert await chain_ids(connection, [first, third]) == {first: [first, second, third],
                                                                third: [first, second, third]}
        audits = (await connection.execute(select(audit).order_by(audit.c.id))).all()
    assert [(a.action, a.job_id, a.detail["parent_job_id"], a.detail["attempt"]) for a in audits] == [
        ("job.retry_dispatched", second, first, 2), ("job.retry_dispatched", third, second, 3)]
    events = [(h.handler, h.result, h.message) for h in await job_history(store, first) if h.handler == "RetryJobs"]
    assert events == [
        ("RetryJobs", "NEED_RETRY", "attempt 1 of 3 ended FAILED (nonzero_exit); retry scheduled in 5.000s"),
        ("RetryJobs", "SUCCESS", f"retry 1 of 2 created as job {second}"),
    ]
    assert [(h.result, h.message) for h in await job_history(store, third) if h.handler == "RetryJobs"][-1] == (
        "GIVE_UP", "attempt 3 of 3 ended FAILED (nonzero_exit); no retry left")
    created = (await job_history(store, second))[0]
    assert (created.handler, created.to_state) == ("RetryJobs", "PENDING")


async def test_a_retry_that_succeeds_ends_the_chain_and_is_counted(store):
    worker = await add_worker(store)
    first = await submit(store, retry_policy=POLICY)
    await fail(store, worker, first)
    await run_retries(store, NOW)
    (second,) = (await run_retries(store, NOW + 5)).created
    assert (await job(store, second)).idempotency_key == f"job-{first}:retry:1"
    succeeded = counter("corral_job_retry_succeeded_total")
    await fail(store, worker, second, exit_code=0)
    await run_retries(store, NOW + 10)
    assert (await job(store, second)).retry_state == "done"
    assert counter("corral_job_retry_succeeded_total") == succeeded + 1


async def test_a_cancelled_job_is_not_retried(store):
    first = await submit(store, retry_policy=POLICY)
    async with store.write() as connection:
        await cancel_job(connection, first, NOW)
    assert (await job(store, first)).state == "CANCELLED"
    assert (await run_retries(store, NOW + 1000)).created == []
    row = await job(store, first)
    assert (row.retry_state, row.retry_cause) == ("not_retried", "user_cancelled")


async def test_a_job_without_a_policy_is_untouched(store):
    worker = await add_worker(store)
    plain = await submit(store)
    await fail(store, worker, plain)
    assert not (await run_retries(store, NOW + 1000)).changed
    row = await job(store, plain)
    assert (row.retry_state, row.max_retries, row.retry_policy) == (None, 0, None)


async def test_the_policy_in_effect_merges_job_project_and_cluster_defaults(store):
    async with store.write() as connection:
        await store_default(connection, "project", "vision", RetryPolicy(retry_delay=7, backoff="exponential"), NOW)
        await store_default(connection, "cluster", "", RetryPolicy(max_retries=1, jitter="none"), NOW)
    config = RetryPolicy(max_retries=5, retry_delay=99, jitter_ratio=0.5)
    cluster_only = await job(store, await submit(store, config_default=config))
    assert (cluster_only.max_retries, cluster_only.retry_policy["retry_delay"]) == (1, 99)
    row = await job(store, await submit(store, project="vision", retry_policy={"max_retries": 3},
                                        config_default=config))
    assert row.max_retries == 3
    assert {k: row.retry_policy[k] for k in ("retry_delay", "backoff", "jitter", "jitter_ratio")} == {
        "retry_delay": 7, "backoff": "exponential", "jitter": "none", "jitter_ratio": 0.5}
    off = await job(store, await submit(store, project="vision", retry_policy={"max_retries": 0}))
    assert (off.max_retries, off.retry_state) == (0, None)


async def test_two_controllers_dispatching_the_same_retry_create_one_child(store):
    worker = await add_worker(store)
    first = await submit(store, retry_policy=POLICY)
    await fail(store, worker, first)
    await run_retries(store, NOW)
    other = await Store.open(str(store.engine.url.render_as_string(hide_password=False)))
    try:
        reports = await asyncio.gather(run_retries(store, NOW + 5), run_retries(other, NOW + 5),
                                       return_exceptions=True)
    finally:
        await other.close()
    for _ in range(2):  # whoever lost the race re-reads and finds nothing left to do
        await run_retries(store, NOW + 5)
    assert len(await children(store, first)) == 1, reports


async def ended_cause(store, job_id, now) -> str:
    await run_retries(store, now)
    return (await job(store, job_id)).retry_cause


async def test_the_cause_is_read_from_what_the_job_recorded(store):
    worker = await add_worker(store, cpu=8)
    build, oom = [await submit(store, retry_policy=POLICY) for _ in range(2)]
    lost = await submit(store, retry_policy=POLICY, max_retries_preemption=0)
    await settle(store)
    tasks = {j: (await job_tasks(store, j))[0] for j in (build, oom, lost)}
    await report(store, worker, (tasks[build].id, 0, "BUILDING"), (tasks[build].id, 0, "FAILED"))
    await report(store, worker, (tasks[oom].id, 0, "BUILDING"), (tasks[oom].id, 0, "PREPARED"),
                 (tasks[lost].id, 0, "BUILDING"), (tasks[lost].id, 0, "PREPARED"))
    await settle(store)
    async with store.write() as connection:
        await ingest_heartbeat(connection, worker, [
            TaskReport(task_id=tasks[oom].id, attempt=0, state="RUNNING", at=NOW),
            TaskReport(task_id=tasks[oom].id, attempt=0, state="FAILED", exit_code=137, oom_killed=True, at=NOW,
                       reason="out of memory")], NOW)
    await settle(store)
    await reap(store, NOW + 100)
    await settle(store, NOW + 100)
    assert [(await job(store, j)).state for j in (build, oom, lost)] == ["FAILED", "FAILED", "LOST"]
    assert [await ended_cause(store, j, NOW + 100) for j in (build, oom, lost)] == [
        "build_failure", "oom_killed", "agent_transient"]


async def test_a_job_not_placed_in_time_is_retried_as_a_scheduler_timeout(store):
    first = await submit(store, retry_policy=POLICY, scheduling_timeout=10)
    await settle(store, NOW + 11)
    assert (await job(store, first)).state == "UNSCHEDULABLE"
    assert await ended_cause(store, first, NOW + 11) == "scheduler_timeout"
    assert (await job(store, first)).retry_state == "scheduled"


async def test_a_retry_key_taken_by_a_job_submitted_by_hand_is_never_taken_over(store):
    worker = await add_worker(store)
    first = await submit(store, key="nightly", retry_policy=POLICY)
    squatter = await submit(store, key="nightly:retry:1")
    await fail(store, worker, first)
    await run_retries(store, NOW)
    assert (await run_retries(store, NOW + 5)).created == []
    assert not (await run_retries(store, NOW + 5)).changed  # settled: no pass spins on it
    assert (await job(store, first)).retry_state == "not_retried"
    assert (await job(store, squatter)).parent_job_id is None
    last = (await job_history(store, first))[-1]
    assert (last.result, last.message) == ("SKIPPED", f"its retry key 'nightly:retry:1' is taken by job {squatter}; "
                                                      "not retried")


async def test_a_gang_past_its_scheduling_timeout_classifies_as_a_scheduler_timeout(store):
    gang = await submit(store, retry_policy=POLICY, scheduling_timeout=10, gang=True, replicas=2)
    plain = await submit(store, retry_policy=POLICY, command=["true"])
    async with store.write() as connection:
        await cancel_job(connection, plain, NOW)
    await settle(store, NOW + 11)
    async with store.read() as connection:
        ends = {t.job_id: t.end for t in await retry_targets(connection, NOW + 11)}
    assert (ends[gang].state, classify(ends[gang])) == ("UNSCHEDULABLE", FailureCause.SCHEDULER_TIMEOUT)
    assert (ends[plain].state, classify(ends[plain])) == ("CANCELLED", FailureCause.USER_CANCELLED)


async def test_a_retry_already_due_when_decided_is_created_in_the_same_run(store):
    worker = await add_worker(store)
    first = await submit(store, retry_policy=POLICY)
    await fail(store, worker, first)
    (second,) = (await run_retries(store, NOW + 60)).created  # decided late: due since NOW + 5
    assert (await job(store, second)).parent_job_id == first
    assert [h.result for h in await job_history(store, first) if h.handler == "RetryJobs"] == [
        "NEED_RETRY", "SUCCESS"]
    assert not (await run_retries(store, NOW + 60)).changed


async def test_a_launched_jobs_retry_stays_in_its_launch_tree(store):
    worker = await add_worker(store)
    driver = await submit(store, command=["sleep", "1"])
    spec = JobSpec(command=["false"], retry_policy=RetryPolicy(max_retries=1, retry_delay=1, jitter="none"))
    async with store.write() as connection:
        launched = await insert_job(connection, spec, None, NOW, name="driver/step", launched_by=driver,
                                    **await retry_columns_now(connection, spec, None))
    await fail(store, worker, launched)
    (child,) = (await run_retries(store, NOW + 2)).created
    row = await job(store, child)
    assert (row.launched_by, row.name) == (driver, "driver/step")

