"""Every Prometheus metric the controller exposes at /metrics, named once here.

One registry per process (not the library's global one, so tests that build several apps in
one interpreter do not collide on names); parts of the controller import the metric they
update from this module.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

REGISTRY = CollectorRegistry()

TRANSITIONS = Counter(
    "corral_handler_outcomes", "Outcomes of lifecycle handler runs, by handler and SchedulingResult.",
    ["handler", "result"], registry=REGISTRY)
HEARTBEAT_SECONDS = Histogram(
    "corral_heartbeat_ingest_seconds", "Time to apply a worker heartbeat's reports and read its orders.",
    registry=REGISTRY, buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))

# The router (corral.serving).
ROUTER_REQUESTS = Counter(
    "corral_router_requests", "Requests through the router, by deployment and HTTP status.",
    ["deployment", "status"], registry=REGISTRY)
ROUTER_LATENCY = Histogram(
    "corral_router_request_seconds", "Time from a request's arrival at the router to the end of its response.",
    ["deployment"], registry=REGISTRY,
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
ROUTER_IN_FLIGHT = Gauge(
    "corral_router_in_flight", "Requests granted and not yet finished, by deployment.", ["deployment"],
    registry=REGISTRY)
ROUTER_QUEUE_DEPTH = Gauge(
    "corral_router_queue_depth", "Requests waiting for a deployment to load (queued or joined to a swap).",
    registry=REGISTRY)
ROUTER_COLD_START = Histogram(
    "corral_router_cold_start_seconds", "Time a swap took to make a deployment ready, by deployment.",
    ["deployment"], registry=REGISTRY, buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600))
ROUTER_EVICTIONS = Counter(
    "corral_router_evictions", "Deployments scaled down by the router, by deployment and reason.",
    ["deployment", "reason"], registry=REGISTRY)
REPLICA_HEALTH = Counter(
    "corral_replica_health_changes", "Health probe results that changed, by deployment and result.",
    ["deployment", "healthy"], registry=REGISTRY)


def exposition() -> tuple[bytes, str]:
    """The current metrics in the Prometheus text format, and its content type."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
