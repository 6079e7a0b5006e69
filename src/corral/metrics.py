"""Every Prometheus metric the controller exposes at /metrics, named once here.

One registry per process (not the library's global one, so tests that build several apps in
one interpreter do not collide on names); parts of the controller import the metric they
update from this module.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

if TYPE_CHECKING:
    from corral.controller.overview import ClusterSummary

REGISTRY = CollectorRegistry()

TRANSITIONS = Counter(
    "corral_handler_outcomes", "Outcomes of lifecycle handler runs, by handler and SchedulingResult.",
    ["handler", "result"], registry=REGISTRY)
HEARTBEAT_SECONDS = Histogram(
    "corral_heartbeat_ingest_seconds", "Time to apply a worker heartbeat's reports and read its orders.",
    registry=REGISTRY, buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))
HANDLER_TAKEOVERS = Counter(
    "corral_handler_takeovers", "Handlers this controller ran whose previous runner, another controller, is gone "
    "(a failover).", ["handler"], registry=REGISTRY)
RETRY_SCHEDULED = Counter(
    "corral_job_retry_scheduled", "Failed jobs whose retry was scheduled, by failure cause.", ["cause"],
    registry=REGISTRY)
RETRY_EXHAUSTED = Counter(
    "corral_job_retry_exhausted", "Failed jobs with no retry left, by failure cause.", ["cause"], registry=REGISTRY)
RETRY_SUCCEEDED = Counter(
    "corral_job_retry_succeeded", "Retry jobs (retry_count > 0) that succeeded.", registry=REGISTRY)

TASKS_PREEMPTED = Counter(
    "corral_priority_preemptions", "Tasks ordered to stop to make room for higher-priority work.",
    registry=REGISTRY)
SCHEDULING_SECONDS = Histogram(
    "corral_scheduling_decision_seconds", "Time to read the cluster and decide one scheduling pass (no writes).",
    registry=REGISTRY, buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
ESTIMATE_SECONDS = Histogram(
    "corral_estimate_simulation_seconds", "Time to simulate the queue ahead for every pending job's start estimate.",
    registry=REGISTRY, buckets=(0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1, 2.5, 5, 10))
ESTIMATE_ERROR_SECONDS = Histogram(
    "corral_estimate_error_seconds", "How far a start estimate was from the job's start, by how long before it was "
    "made (horizon).", ["horizon"], registry=REGISTRY,
    buckets=(10, 30, 60, 120, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 24 * 3600))
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
HANDLER_TARGET_ERRORS = Counter(
    "corral_handler_target_errors", "Errors about one target of a handler run: the target was set aside, the "
    "others proceeded.", ["handler"], registry=REGISTRY)
STORE_WRITE_SECONDS = Histogram(
    "corral_store_write_seconds", "Time each committed write transaction held the store's single writer.",
    registry=REGISTRY, buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1))
HANDLER_LOCK_BUSY = Counter(
    "corral_handler_lock_busy", "Handler runs skipped because another controller held the handler's lock.",
    ["handler"], registry=REGISTRY)
FENCED_WRITES = Counter(
    "corral_fenced_writes", "Handler transactions rolled back by fencing: another controller changed the rows first.",
    ["handler"], registry=REGISTRY)
ENGINE_PASSES = Counter("corral_engine_passes", "Passes the engine loop ran over its handlers.", registry=REGISTRY)
PLACEMENTS = Counter("corral_placements", "Tasks placed on a worker by the scheduler.", registry=REGISTRY)
EVENTS_SENT = Counter("corral_events_sent", "Events sent to event stream subscribers.", registry=REGISTRY)
EVENTS_PRUNED = Counter("corral_events_pruned", "Events deleted for being older than the retention window.",
                        registry=REGISTRY)
RELAY_CONNECT_SECONDS = Histogram(
    "corral_relay_connect_seconds", "Time from a client's channel request to its worker dialing back (paired).",
    registry=REGISTRY, buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15))
RELAYS_OPEN = Gauge("corral_relay_attachments_open", "Channels this controller relays now (paired, not ended).",
                    registry=REGISTRY)
NOTIFICATIONS_DELIVERED = Counter(
    "corral_notifications_delivered", "Job webhooks their receiver took (2xx), by event.", ["event"],
    registry=REGISTRY)
NOTIFICATIONS_FAILED = Counter(
    "corral_notifications_failed", "Tries of job webhooks that failed (no answer, or not 2xx), by event.", ["event"],
    registry=REGISTRY)
NOTIFICATIONS_GAVE_UP = Counter(
    "corral_notifications_gave_up", "Job webhooks given up after their last try, by event.", ["event"],
    registry=REGISTRY)
EVENT_SUBSCRIBERS = Gauge("corral_event_subscribers", "Clients following the event stream now.", registry=REGISTRY)


class ClusterCollector:
    """Gauges read from the store at scrape time (the /metrics route sets `summary` just before)."""

    def __init__(self) -> None:
        self.summary: ClusterSummary | None = None

    def collect(self):
        summary = self.summary
        if summary is None:
            return
        yield _family("corral_jobs", "Jobs by state.", ["state"], [((k,), v) for k, v in summary.jobs.items()])
        yield _family("corral_tasks", "Tasks by state.", ["state"], [((k,), v) for k, v in summary.tasks.items()])
        yield _family("corral_workers", "Workers by state.", ["state"],
                      [((k,), v) for k, v in summary.workers.items()])
        yield _family("corral_queue_jobs", "Jobs with tasks waiting to be placed, per pool.", ["pool"],
                      [((q.pool,), q.jobs) for q in summary.queue])
        yield _family("corral_queue_tasks", "Tasks waiting to be placed, per pool.", ["pool"],
                      [((q.pool,), q.tasks) for q in summary.queue])
        yield _family("corral_queue_oldest_seconds", "Age of the oldest job waiting to be placed, per pool.",
                      ["pool"], [((q.pool,), q.oldest_seconds) for q in summary.queue])
        yield _family("corral_pool_capacity", "Capacity of the alive workers per pool and resource "
                      "(cpu in cores, memory in bytes, gpu in devices).", ["pool", "resource"],
                      [((p.pool, k), v) for p in summary.pools for k, v in p.capacity.items()])
        yield _family("corral_pool_used", "Resources reserved by tasks per pool and resource.", ["pool", "resource"],
                      [((p.pool, k), v) for p in summary.pools for k, v in p.used.items()])
        yield _family("corral_worker_capacity", "Capacity per worker and resource.", ["worker", "resource"],
                      [((w.id, k), v) for w in summary.per_worker for k, v in w.capacity.items()])
        yield _family("corral_worker_used", "Resources reserved per worker and resource.", ["worker", "resource"],
                      [((w.id, k), v) for w in summary.per_worker for k, v in w.used.items()])


def _family(name: str, documentation: str, labels: list[str], samples) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=labels)
    for values, value in samples:
        family.add_metric(list(values), float(value))
    return family


CLUSTER = ClusterCollector()
REGISTRY.register(CLUSTER)

# The router (corral.serving).
ROUTER_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class RouterTraffic:
    """The router's requests by deployment and status (`corral_router_requests`, a counter) and their latency by
    deployment (`corral_router_request_seconds`, a histogram), counted in plain dicts and lists and turned into
    samples when scraped.

    A labelled Counter's and Histogram's update costs a dozen calls and three locks, on every proxied request;
    here it is one call. The router counts on its event loop alone. A scrape shows the same names, types, labels,
    values and creation times as the Counter and the Histogram did."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = (*map(float, bounds), math.inf)
        self.requests: dict[tuple[str, int], list[float]] = {}  # (deployment, status) -> [count, created]
        self.latency: dict[str, list[float]] = {}  # deployment -> [per bucket count..., sum, created]

    def record(self, deployment: str, status: int, seconds: float | None = None) -> None:
        """One request ended with `status`; `seconds` from its arrival to its response's end, if it was answered."""
        try:
            self.requests[(deployment, status)][0] += 1
        except KeyError:
            self.requests[(deployment, status)] = [1, time.time()]
        if seconds is None:
            return
        counts = self.latency.get(deployment)
        if counts is None:
            counts = self.latency[deployment] = [0] * len(self.bounds) + [0.0, time.time()]
        counts[bisect.bisect_left(self.bounds, seconds)] += 1  # the first bucket whose bound is >= seconds
        counts[-2] += seconds

    def collect(self) -> Iterator[Metric]:
        requests = Metric("corral_router_requests", "Requests through the router, by deployment and HTTP status.",
                          "counter")
        for (deployment, status), (count, created) in list(self.requests.items()):
            labels = {"deployment": deployment, "status": str(status)}
            requests.samples += (Sample("corral_router_requests_total", labels, float(count)),
                                 Sample("corral_router_requests_created", labels, created))
        yield requests
        latency = Metric("corral_router_request_seconds",
                         "Time from a request's arrival at the router to the end of its response.", "histogram")
        for deployment, counts in list(self.latency.items()):
            counts = list(counts)
            total = 0.0
            for bound, count in zip(self.bounds, counts[:-2], strict=True):
                total += count
                latency.samples.append(Sample("corral_router_request_seconds_bucket",
                                              {"deployment": deployment, "le": floatToGoString(bound)}, total))
            labels = {"deployment": deployment}
            latency.samples += (Sample("corral_router_request_seconds_count", labels, total),
                                Sample("corral_router_request_seconds_sum", labels, counts[-2]),
                                Sample("corral_router_request_seconds_created", labels, counts[-1]))
        yield latency


ROUTER_TRAFFIC = RouterTraffic(ROUTER_LATENCY_BUCKETS)
REGISTRY.register(ROUTER_TRAFFIC)
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
