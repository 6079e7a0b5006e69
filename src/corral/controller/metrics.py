"""Every Prometheus metric the controller exposes at /metrics, named once here.

One registry per process (not the library's global one, so tests that build several apps in
one interpreter do not collide on names); parts of the controller import the metric they
update from this module.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

REGISTRY = CollectorRegistry()

TRANSITIONS = Counter(
    "corral_handler_outcomes", "Outcomes of lifecycle handler runs, by handler and SchedulingResult.",
    ["handler", "result"], registry=REGISTRY)
HEARTBEAT_SECONDS = Histogram(
    "corral_heartbeat_ingest_seconds", "Time to apply a worker heartbeat's reports and read its orders.",
    registry=REGISTRY, buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))

TASKS_PREEMPTED = Counter(
    "corral_priority_preemptions", "Tasks ordered to stop to make room for higher-priority work.",
    registry=REGISTRY)
SCHEDULING_SECONDS = Histogram(
    "corral_scheduling_decision_seconds", "Time to read the cluster and decide one scheduling pass (no writes).",
    registry=REGISTRY, buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
GANGS_PREEMPTED = Counter(
    "corral_gangs_preempted", "Gang drains started: one per epoch, however many members failed at once.",
    registry=REGISTRY)
FORCE_DRAINED = Counter(
    "corral_gang_preemptions_force_drained", "Tasks forced from PREEMPTING to PREEMPTED past the drain timeout.",
    registry=REGISTRY)
DRAINS_COMPLETED = Counter(
    "corral_gang_preemptions_completed", "Gang drains completed, by outcome: requeued (placed again) or failed.",
    ["outcome"], registry=REGISTRY)
DRAIN_SECONDS = Histogram(
    "corral_gang_drain_seconds", "Time from a gang drain's start to its completion.",
    registry=REGISTRY, buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300))


def exposition() -> tuple[bytes, str]:
    """The current metrics in the Prometheus text format, and its content type."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
