"""The router's request counts and latencies, counted in plain lists, scrape as the Counter and Histogram did."""

from __future__ import annotations

import random
import re

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from corral.metrics import ROUTER_LATENCY_BUCKETS, RouterTraffic


def scraped(registry: CollectorRegistry) -> str:
    """The exposition with creation times blanked: those differ by the microseconds between the two updates."""
    return re.sub(r"(_created\{[^}]*\}) \S+", r"\1 T", generate_latest(registry).decode())


def test_a_scrape_shows_what_prometheus_counter_and_histogram_show():
    reference = CollectorRegistry()
    requests = Counter("corral_router_requests", "Requests through the router, by deployment and HTTP status.",
                       ["deployment", "status"], registry=reference)
    latency = Histogram("corral_router_request_seconds",
                        "Time from a request's arrival at the router to the end of its response.",
                        ["deployment"], registry=reference, buckets=ROUTER_LATENCY_BUCKETS)
    ours = CollectorRegistry()
    traffic = RouterTraffic(ROUTER_LATENCY_BUCKETS)
    ours.register(traffic)
    assert scraped(ours) == scraped(reference)  # nothing counted yet: the families are named all the same
    pick = random.Random(7)
    seconds_of = [0.0, 0.001, 0.0025, 120.0, 121.0, 1e-6]  # bounds themselves, and past the last one
    for _ in range(5000):
        deployment = pick.choice(["a", "b", "c-d"])
        status = pick.choice([200, 200, 200, 404, 429, 499, 502, 503])
        seconds = pick.choice([*seconds_of, pick.expovariate(50.0)]) if pick.random() < 0.8 else None
        requests.labels(deployment, status).inc()
        if seconds is not None:
            latency.labels(deployment).observe(seconds)
        traffic.record(deployment, status, seconds)
    assert scraped(ours) == scraped(reference)
    assert ours.get_sample_value("corral_router_requests_total", {"deployment": "a", "status": "200"}) == \
        reference.get_sample_value("corral_router_requests_total", {"deployment": "a", "status": "200"})
