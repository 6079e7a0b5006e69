"""The overview's serving summary: deployments by state, replicas wanted and ready, and which fall short."""

from __future__ import annotations

from corral.controller.deployments_board import DeploymentHealth, ReplicaHealth, summarize, with_probe
from corral.core.serving import Probe


def replica(id_, state, failures=0) -> ReplicaHealth:
    row = ReplicaHealth(id=id_, state=state, state_since=0.0, job_id=id_, address=None, worker_id=None,
                        worker_name=None)
    return with_probe(row, Probe(1.0, failures == 0, failures, "503 from /health" if failures else "200"))


def deployment(name, state, wanted, replicas) -> DeploymentHealth:
    return DeploymentHealth(id=1, name=name, state=state, state_since=0.0, wanted=wanted,
                            ready=sum(r.state == "HEALTHY" for r in replicas), models=[name], project="default",
                            replicas=replicas, events=[])


def test_the_summary_counts_ready_replicas_and_names_deployments_short_of_them():
    board = [
        deployment("a", "READY", 2, [replica(1, "HEALTHY"), replica(2, "HEALTHY", failures=1)]),
        deployment("b", "SCALING", 2, [replica(3, "UNHEALTHY", failures=3), replica(4, "PROVISIONING")]),
        deployment("c", "READY", 1, [replica(5, "TERMINATING", failures=2)]),
    ]
    summary = summarize(board)
    assert summary.deployments == {"READY": 2, "SCALING": 1}
    assert (summary.wanted, summary.ready) == (5, 2)
    # a failing check on a counted replica shows before it is UNHEALTHY; a replica on its way out does not count
    assert summary.unhealthy == 2
    assert summary.degraded == ["b", "c"]


def test_a_probe_fills_in_the_replicas_health_and_no_probe_leaves_it_unknown():
    unprobed = ReplicaHealth(id=1, state="DEGRADED", state_since=0.0, job_id=1, address="h:1", worker_id="w",
                             worker_name="w1")
    assert with_probe(unprobed, None).probe_ok is None
    probed = with_probe(unprobed, Probe(5.0, False, 2, "503 from http://h:1/health"))
    assert (probed.probed_at, probed.probe_ok, probed.failures, probed.probe_detail) == (
        5.0, False, 2, "503 from http://h:1/health")
