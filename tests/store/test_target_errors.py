"""One job a handler raises about is set aside; the run goes on for the others and commits."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update

from corral.core.deployment_spec import DeploymentSpec
from corral.core.lifecycle import StatusTransitions, TransitionStatus
from corral.core.retry_policy import RetryPolicy
from corral.core.serving import DeploymentState
from corral.core.spec import JobSpec
from corral.core.states import IllegalTransition
from corral.engine import coordinator
from corral.engine.coordinator import run_handler
from corral.engine.effects import Place
from corral.engine.handlers import ScheduleJobs
from corral.engine.retries import run_retries
from corral.engine.serving_coordinator import run_serving_handler
from corral.engine.serving_effects import CancelJob, SetAddress
from corral.engine.serving_handlers import CheckPendingDeployment, ProvisioningReplica
from corral.engine.target_errors import GIVE_UP_AFTER, TargetErrors
from corral.metrics import HANDLER_TARGET_ERRORS
from corral.store.deployments import insert_deployment
from corral.store.jobs import insert_job
from corral.store.schema import deployments, history, jobs, replicas
from tests.store.helpers import (
    NOW,
    add_worker,
    job,
    job_history,
    job_tasks,
    retry_columns_now,
    run_task,
    settle,
    submit,
)
from tests.store.test_serving_store import serve_pass

SERVICE = DeploymentSpec(name="svc", command=["serve"], min_replicas=1, resources={"cpu": 1})


async def poison(store, job_id: int, **spec) -> None:
    """Write spec fields no submission lets through today, as a row from before a validation would hold them."""
    async with store.write() as connection:
        row = await connection.execute(jobs.select().where(jobs.c.id == job_id))
        stored = dict(row.one().spec)
        await connection.execute(update(jobs).where(jobs.c.id == job_id).values(spec={**stored, **spec}))


def target_errors() -> float:
    return HANDLER_TARGET_ERRORS.labels("ScheduleJobs")._value.get()


async def test_a_job_the_scheduler_raises_about_is_set_aside_and_the_others_are_placed(store):
    await add_worker(store)
    before = await submit(store)
    bad = await submit(store, replicas=2)
    after = await submit(store, gang=True, replicas=2)
    await poison(store, bad, begin="tomorrow")  # compared with a time: TypeError inside the handler
    errors, counted = TargetErrors(), target_errors()
    report = await run_handler(store, ScheduleJobs(), NOW, errors)
    assert report.changed
    for placed in (before, after):
        assert {t.state for t in await job_tasks(store, placed)} == {"ASSIGNED"}
    assert {t.state for t in await job_tasks(store, bad)} == {"PENDING"}
    assert target_errors() == counted + 1
    (record,) = [h for h in await job_history(store, bad) if h.handler == "ScheduleJobs"]
    assert record.result == "SKIPPED"
    assert record.message.startswith("ScheduleJobs failed on it (TypeError: ")
    assert record.message.endswith("); set aside, the others proceed")

    for run in range(2, GIVE_UP_AFTER + 1):
        await run_handler(store, ScheduleJobs(), NOW + run, errors)
    await settle(store, now=NOW + 10)
    ended = await job(store, bad)
    assert (ended.state, ended.outcome) == ("FAILED", "FAILED")
    assert {t.state for t in await job_tasks(store, bad)} == {"KILLED"}
    messages = [h.message for h in await job_history(store, bad) if (h.message or "").startswith("ScheduleJobs failed")]
    assert len(messages) == 2  # the first failure of the streak, then the give-up: not one record per run
    assert messages[1].startswith(f"ScheduleJobs failed on it {GIVE_UP_AFTER} runs in a row (TypeError: ")


async def test_a_job_whose_spec_cannot_be_read_does_not_hold_back_the_others(store):
    await add_worker(store)
    bad = await submit(store)
    good = await submit(store)
    await poison(store, bad, constraints=["=== not a constraint"])
    await run_handler(store, ScheduleJobs(), NOW, TargetErrors())
    assert [t.state for t in await job_tasks(store, good)] == ["ASSIGNED"]
    assert [t.state for t in await job_tasks(store, bad)] == ["PENDING"]
    (record,) = [h for h in await job_history(store, bad) if h.handler == "ScheduleJobs"]
    assert record.message.startswith("ScheduleJobs failed on it (its spec cannot be read: ")


async def test_a_job_whose_changes_cannot_be_worked_out_writes_none_of_them(store):
    """A gang whose second member has no placement fails half-way through; its first member stays unplaced."""

    class LosesAnAssignment(ScheduleJobs):
        def execute(self, targets, snapshot):
            decision = super().execute(targets, snapshot)
            decision.effects = [e for e in decision.effects if not (isinstance(e, Place) and e.task_id == lost)]
            return decision

    await add_worker(store)
    gang = await submit(store, gang=True, replicas=2)
    other = await submit(store)
    lost = (await job_tasks(store, gang))[1].id
    await run_handler(store, LosesAnAssignment(), NOW, TargetErrors())
    assert [t.state for t in await job_tasks(store, other)] == ["ASSIGNED"]
    assert {t.state for t in await job_tasks(store, gang)} == {"PENDING"}
    assert (await job(store, gang)).state == "PENDING"


async def test_a_begin_time_past_any_calendar_is_a_reason_not_an_error(store):
    await add_worker(store)
    far = await submit(store)
    now = await submit(store)
    await poison(store, far, begin=1e20)  # a row from before `begin` was bounded at submission
    await settle(store)
    assert [t.state for t in await job_tasks(store, now)] == ["ASSIGNED"]
    assert (await job(store, far)).pending_reason == "not before 1e+20 (unix seconds)"


async def test_retry_jobs_sets_aside_a_job_it_cannot_retry_and_retries_the_others(store):
    worker = await add_worker(store)
    policy = RetryPolicy(max_retries=2, retry_delay=1, jitter="none")
    bad, good = await retry_job(store, policy), await retry_job(store, policy)
    await settle(store)
    for job_id in (bad, good):
        (task,) = await job_tasks(store, job_id)
        await run_task(store, worker, task, exit_code=1)
    await poison(store, bad, command=[])  # its child cannot be made from this spec
    errors = TargetErrors()
    report = await run_retries(store, NOW + 1, errors=errors)
    (child,) = report.created
    assert (await job(store, child)).parent_job_id == good
    untouched = await job(store, bad)
    assert (untouched.retry_state, untouched.retry_due_at) == ("armed", None)  # not scheduled half-way
    (record,) = [h for h in await job_history(store, bad) if h.handler == "RetryJobs"]
    assert (record.result, record.message.startswith("RetryJobs failed on it (ValidationError: ")) == ("SKIPPED", True)
    for run in range(1, GIVE_UP_AFTER):
        await run_retries(store, NOW + 1 + run, errors=errors)
    assert (await job(store, bad)).retry_state == "not_retried"
    records = [h for h in await job_history(store, bad) if h.handler == "RetryJobs"]
    assert [r.result for r in records] == ["SKIPPED", "GIVE_UP"]


async def retry_job(store, policy) -> int:
    spec = JobSpec(command=["false"], retry_policy=policy)
    async with store.write() as connection:
        return await insert_job(connection, spec, None, NOW, **await retry_columns_now(connection, spec, None))


async def test_a_serving_handler_sets_aside_the_deployment_it_raises_about_and_moves_the_others(store):
    async with store.write() as connection:
        bad = await insert_deployment(connection, SERVICE.model_copy(update={"name": "bad"}), [], NOW)
        good = await insert_deployment(connection, SERVICE, [], NOW)

    class RaisesAboutOne(CheckPendingDeployment):
        def execute(self, targets, snapshot):
            if any(t.id == bad for t in targets):
                raise RuntimeError("cannot handle this one")
            return super().execute(targets, snapshot)

    errors = TargetErrors()
    for run in range(3):
        await run_serving_handler(store, RaisesAboutOne(), NOW + run, {}, errors=errors)
    async with store.read() as connection:
        states = dict((await connection.execute(select(deployments.c.id, deployments.c.state))).all())
        (record,) = (await connection.execute(
            select(history).where(history.c.deployment_id == bad, history.c.handler == "CheckPendingDeployment"))).all()
    assert states == {bad: "PENDING", good: "SCALING"}
    assert record.message == ("CheckPendingDeployment failed on it (RuntimeError: cannot handle this one); set aside, "
                              "the others proceed")
    assert (record.result, record.repeats, record.last_at) == ("SKIPPED", 3, NOW + 2)  # every run, on one record


async def test_a_serving_change_that_fails_for_one_replica_keeps_nothing_of_it(store):
    await add_worker(store)
    async with store.write() as connection:
        await insert_deployment(connection, SERVICE, [], NOW)
    await serve_pass(store, NOW)
    async with store.read() as connection:
        (replica_id,) = (await connection.execute(select(replicas.c.id))).scalars()

    class CancelsAJobThatIsGone(ProvisioningReplica):  # an effect whose applier fails, after the replica's move
        effects = (SetAddress, CancelJob)

        def execute(self, targets, snapshot):
            decision = super().execute(targets, snapshot)
            if any(t.id == replica_id for t in targets):
                decision.effects += [SetAddress(replica_id, "10.0.0.1:9000"), CancelJob(replica_id, 10**9)]
                decision.result.successes.append(replica_id)
            return decision

    report_ = await run_serving_handler(store, CancelsAJobThatIsGone(), NOW, {}, errors=TargetErrors())
    async with store.read() as connection:
        row = (await connection.execute(select(replicas).where(replicas.c.id == replica_id))).one()
        records = (await connection.execute(select(history).where(history.c.replica_id == replica_id))).all()
    assert (row.state, row.address) == ("PROVISIONING", None)
    assert report_.changed  # the set-aside record
    assert records[-1].message == ("ProvisioningReplica failed on it (NoSuchJob: no job 1000000000); set aside, "
                                   "the others proceed")


class SkipsScaling(CheckPendingDeployment):
    """Declares a move no row of the deployment table allows."""

    transitions = StatusTransitions(success=TransitionStatus(deployment=DeploymentState.READY))


async def test_a_serving_move_the_tables_refuse_raises_under_strict_moves(store, monkeypatch):
    monkeypatch.setattr(coordinator, "STRICT", True)
    async with store.write() as connection:
        await insert_deployment(connection, SERVICE, [], NOW)
    with pytest.raises(IllegalTransition, match="a deployment cannot go from PENDING to READY"):
        await run_serving_handler(store, SkipsScaling(), NOW, {}, errors=TargetErrors())


async def test_a_serving_move_the_tables_refuse_sets_its_target_aside_in_production(store, monkeypatch):
    monkeypatch.setattr(coordinator, "STRICT", False)
    async with store.write() as connection:
        deployment_id = await insert_deployment(connection, SERVICE, [], NOW)
    await run_serving_handler(store, SkipsScaling(), NOW, {}, errors=TargetErrors())
    async with store.read() as connection:
        state = (await connection.execute(select(deployments.c.state))).scalar_one()
        (record,) = (await connection.execute(select(history).where(
            history.c.deployment_id == deployment_id, history.c.handler == "CheckPendingDeployment"))).all()
    assert (state, record.result, record.from_state) == ("PENDING", "SKIPPED", "PENDING")
    assert record.message.startswith("CheckPendingDeployment failed on it (IllegalTransition: a deployment cannot go "
                                     "from PENDING to READY)")

