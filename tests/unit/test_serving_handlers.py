"""The deployment and replica handlers: their tables against the design's, and their decisions over snapshots."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from corral.core.crash_loop import MAX_DELAY, replacement_delay
from corral.core.deployment_spec import DeploymentSpec
from corral.core.lifecycle import SchedulingResult, judge
from corral.core.serving import DeploymentFacts, Probe, ReplicaFacts, ServingSnapshot, ServingTarget
from corral.core.serving import DeploymentState as D
from corral.core.serving import ReplicaState as R
from corral.core.states import JobState, TaskState
from corral.engine import serving_handlers as h
from corral.engine.serving_coordinator import SERVING_APPLIERS
from corral.engine.serving_effects import CancelJob, CreateReplicas, PublishCatalog, SetAddress, StopReplica

ROOT = Path(__file__).resolve().parents[2]
SPEC = DeploymentSpec(name="svc", command=["serve"], min_replicas=2,
                      health={"interval": 1, "threshold": 3, "startup_timeout": 60})

def snapshot(*replicas: ReplicaFacts, wanted: int = 2, state: D = D.READY, now: float = 100.0,
             probes: dict | None = None) -> ServingSnapshot:
    facts = DeploymentFacts(1, "svc", SPEC, state, 0.0, wanted)
    return ServingSnapshot(now, {1: facts}, {r.id: r for r in replicas}, probes or {})


def replica(id: int, state: R, *, job: JobState = JobState.RUNNING, task: TaskState | None = TaskState.RUNNING,
            address: str | None = "10.0.0.1:9000", since: float = 0.0, created: float = 0.0) -> ReplicaFacts:
    return ReplicaFacts(id, 1, state, since, 100 + id, job, task, address, created)


def run(handler, snap: ServingSnapshot):
    facts = snap.deployments if handler.entity == "deployment" else snap.replicas
    targets = [ServingTarget(f.id, f.state, f.since) for f in facts.values() if f.state in handler.states]
    decision = handler.execute(targets, snap)
    outcomes = judge(targets, decision.result, handler.transitions, now=snap.now, max_tries=None,
                     is_expired=lambda t, _: handler.is_stale(t, snap))
    assert all(isinstance(effect, handler.effects) for effect in decision.effects)  # each one it declares
    return decision, {o.target.id: (o.result, o.transition and (o.transition.deployment or o.transition.replica))
                      for o in outcomes}


def test_scaling_creates_the_missing_replicas_and_replaces_one_whose_process_ended():
    snap = snapshot(replica(1, R.HEALTHY), replica(2, R.HEALTHY, job=JobState.FAILED), state=D.SCALING)
    decision, outcomes = run(h.ScalingDeployment(), snap)
    assert decision.effects == [StopReplica(2, "its process ended"), CreateReplicas(1, 1)]
    assert outcomes == {1: (SchedulingResult.SUCCESS, D.READY)}


def test_scaling_down_stops_the_broken_and_unfinished_before_the_healthy():
    snap = snapshot(replica(1, R.HEALTHY), replica(2, R.PROVISIONING), replica(3, R.UNHEALTHY), wanted=1,
                    state=D.SCALING)
    decision, _ = run(h.ScalingDeployment(), snap)
    assert decision.effects == [StopReplica(3, "scaled down to 1"), StopReplica(2, "scaled down to 1")]


def test_check_replica_rescales_only_on_a_count_mismatch():
    _, outcomes = run(h.CheckReplicaDeployment(), snapshot(replica(1, R.HEALTHY), replica(2, R.DEGRADED)))
    assert outcomes == {}
    _, outcomes = run(h.CheckReplicaDeployment(), snapshot(replica(1, R.HEALTHY)))
    assert outcomes == {1: (SchedulingResult.SUCCESS, D.SCALING)}


def test_reconcile_fails_a_deployment_whose_replica_lost_its_process():
    _, outcomes = run(h.ReconcileDeployment(), snapshot(replica(1, R.HEALTHY, job=JobState.FAILED),
                                                         replica(2, R.HEALTHY)))
    assert outcomes == {1: (SchedulingResult.NEED_RETRY, D.SCALING)}


def test_destroying_stops_every_replica_and_ends_once_none_is_left():
    decision, outcomes = run(h.DestroyingDeployment(), snapshot(replica(1, R.HEALTHY), replica(2, R.TERMINATING),
                                                                 state=D.DESTROYING))
    assert decision.effects == [StopReplica(1, "deployment destroyed")] and outcomes == {}
    _, outcomes = run(h.DestroyingDeployment(), snapshot(state=D.DESTROYING))
    assert outcomes == {1: (SchedulingResult.SUCCESS, D.DESTROYED)}


def test_provisioning_waits_for_a_running_task_with_an_address_and_fails_if_its_job_ends():
    snap = snapshot(replica(1, R.PROVISIONING), replica(2, R.PROVISIONING, task=TaskState.ASSIGNED, address=None),
                    replica(3, R.PROVISIONING, job=JobState.FAILED, task=TaskState.FAILED, address=None))
    decision, outcomes = run(h.ProvisioningReplica(), snap)
    assert outcomes == {1: (SchedulingResult.SUCCESS, R.DEGRADED), 3: (SchedulingResult.NEED_RETRY, R.FAILED_TO_START)}
    assert decision.effects == [SetAddress(1, "10.0.0.1:9000")]


def test_health_check_passes_fails_past_the_threshold_and_is_stale_without_a_recent_probe():
    probes = {1: Probe(99, True, 0), 2: Probe(99, False, 3), 3: Probe(99, False, 2), 4: Probe(10, True, 0)}
    snap = snapshot(replica(1, R.DEGRADED, since=0), replica(2, R.HEALTHY), replica(3, R.HEALTHY),
                    replica(4, R.HEALTHY), probes=probes)
    _, outcomes = run(h.HealthCheckReplica(), snap)
    assert outcomes == {1: (SchedulingResult.SUCCESS, R.HEALTHY), 2: (SchedulingResult.NEED_RETRY, R.UNHEALTHY),
                        4: (SchedulingResult.EXPIRED, R.DEGRADED)}


def test_a_replica_never_probed_is_stale_only_after_three_intervals_in_its_state():
    snap = snapshot(replica(1, R.HEALTHY, since=98), replica(2, R.HEALTHY, since=90))  # window: 3 * 1 + 2 s
    _, outcomes = run(h.HealthCheckReplica(), snap)
    assert outcomes == {2: (SchedulingResult.EXPIRED, R.DEGRADED)}


def test_a_loading_replica_failing_its_checks_is_not_unhealthy_before_its_startup_timeout():
    probes = {1: Probe(99, False, 10), 2: Probe(99, False, 10)}
    snap = snapshot(replica(1, R.DEGRADED, since=50), replica(2, R.DEGRADED, since=30), probes=probes)
    _, outcomes = run(h.HealthCheckReplica(), snap)
    assert outcomes == {2: (SchedulingResult.NEED_RETRY, R.UNHEALTHY)}  # 70s in: past its 60s startup timeout


def test_running_sends_ended_and_failed_to_start_replicas_to_terminating():
    snap = snapshot(replica(1, R.HEALTHY, job=JobState.FAILED), replica(2, R.FAILED_TO_START), replica(3, R.HEALTHY))
    _, outcomes = run(h.RunningReplica(), snap)
    assert outcomes == {1: (SchedulingResult.NEED_RETRY, R.TERMINATING),
                        2: (SchedulingResult.NEED_RETRY, R.TERMINATING)}


def test_an_unhealthy_replica_is_evicted_after_one_more_failure_window():
    snap = snapshot(replica(1, R.UNHEALTHY, since=98), replica(2, R.UNHEALTHY, since=90))
    _, outcomes = run(h.ReplicaEviction(), snap)
    assert outcomes == {2: (SchedulingResult.SUCCESS, R.TERMINATING)}


def test_terminating_cancels_the_job_once_and_ends_when_the_worker_confirmed():
    snap = snapshot(replica(1, R.TERMINATING), replica(2, R.TERMINATING, job=JobState.TERMINATING),
                    replica(3, R.TERMINATING, job=JobState.CANCELLED))
    decision, outcomes = run(h.TerminatingReplica(), snap)
    assert decision.effects == [CancelJob(1, 101)]
    assert outcomes == {3: (SchedulingResult.SUCCESS, R.TERMINATED)}


def test_service_discovery_publishes_healthy_endpoints_of_every_live_deployment():
    snap = snapshot(replica(1, R.HEALTHY), replica(2, R.DEGRADED, address="10.0.0.2:9000"))
    decision, outcomes = run(h.ServiceDiscoverySync(), snap)
    assert outcomes == {}
    (published,) = decision.of(PublishCatalog)
    assert published.catalog.endpoints == {"svc": (h.Endpoint(1, "10.0.0.1:9000"),)}
    assert set(published.catalog.deployments) == {"svc"}


# the replacement backoff -----------------------------------------------------------------


def test_the_delay_doubles_from_one_second_up_to_five_minutes():
    assert [replacement_delay(n) for n in range(6)] == [0, 1, 2, 4, 8, 16]
    assert replacement_delay(9) == 256 and replacement_delay(10) == MAX_DELAY == replacement_delay(10**6)


@pytest.mark.parametrize(("state", "job", "served", "failed"), [
    (R.DEGRADED, JobState.FAILED, False, True),  # its process exited while loading
    (R.FAILED_TO_START, JobState.FAILED, False, True),
    (R.UNHEALTHY, JobState.RUNNING, False, True),  # evicted, never healthy (startup timeout)
    (R.PROVISIONING, JobState.RUNNING, False, False),  # scaled away before it could serve: no failure
    (R.DEGRADED, JobState.FAILED, True, False),  # it served, then died: replaced at once
    (R.HEALTHY, JobState.FAILED, False, False),  # healthy is served, whatever was recorded
])
def test_a_failed_start_is_a_replica_that_failed_before_it_ever_served(state, job, served, failed):
    assert dataclasses.replace(replica(1, state, job=job), served=served).failed_start is failed


def backing_off(failed_starts: int, last: float | None, *replicas, now: float = 100.0):
    snap = snapshot(*replicas, wanted=1, state=D.SCALING, now=now)
    facts = dataclasses.replace(snap.deployments[1], failed_starts=failed_starts, failed_start_at=last)
    return dataclasses.replace(snap, deployments={1: facts})


def test_scaling_waits_out_the_backoff_before_creating_the_next_replica():
    decision, outcomes = run(h.ScalingDeployment(), backing_off(3, 97.0))  # 4 s after 97
    assert decision.effects == [] and outcomes == {}  # stays SCALING, writes nothing
    decision, outcomes = run(h.ScalingDeployment(), backing_off(3, 96.0))
    assert decision.effects == [CreateReplicas(1, 1)] and outcomes[1][1] is D.READY


def test_scaling_counts_the_failed_starts_it_stops_itself():
    loading = replica(2, R.DEGRADED, job=JobState.FAILED)  # its process exited before it served
    decision, _ = run(h.ScalingDeployment(), backing_off(0, None, loading))
    assert decision.effects == [StopReplica(2, "its process ended")]  # the next starts 1 s from now
    served = dataclasses.replace(loading, served=True)
    decision, _ = run(h.ScalingDeployment(), backing_off(0, None, served))
    assert decision.of(CreateReplicas) == [CreateReplicas(1, 1)]  # it had served: replaced at once


@pytest.mark.parametrize("handler", h.SERVING_HANDLERS, ids=lambda handler: handler.name)
def test_every_effect_a_handler_declares_has_an_applier(handler):
    assert all(kind in SERVING_APPLIERS for kind in handler.effects), handler.effects
