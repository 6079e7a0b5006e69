from hypothesis import given
from hypothesis import strategies as st

from corral.core.autoscale import SCALE_UP_WINDOW, Bounds, Sample, decide, needed
from corral.core.deployment_spec import DeploymentSpec

BOUNDS = Bounds(min_replicas=1, max_replicas=3, target_concurrency=1, scale_down_delay=10)


def steady(load: float, since: float, now: float) -> list[Sample]:
    return [Sample(t / 2, load) for t in range(int(since * 2), int(now * 2) + 1)]


def test_load_above_the_target_scales_up_at_once_within_max():
    decision = decide([Sample(99.5, 5), Sample(100, 5)], BOUNDS, current=1, now=100)
    assert decision.replicas == 3
    assert decision.reason == "autoscale: load 5 over 3 s, target 1 → 3 replicas"


def test_scale_down_waits_for_the_delay_then_follows_the_peak_of_the_window():
    samples = steady(3, 0, 50) + steady(0, 50.5, 55)
    assert decide(samples, BOUNDS, current=3, now=55) is None  # only 5 s of lower load
    samples = steady(3, 0, 50) + steady(2, 50.5, 70)
    decision = decide(samples, BOUNDS, current=3, now=70)
    assert decision.replicas == 2
    assert decision.reason.startswith("autoscale: peak load 2 over 10 s")


def test_never_below_one_nor_from_zero():
    scale_to_zero = Bounds(0, 3, 1, 10)
    assert decide(steady(0, 0, 30), scale_to_zero, current=2, now=30).replicas == 1  # zero is the idle timeout's
    assert decide(steady(5, 0, 30), scale_to_zero, current=0, now=30) is None  # a request starts it


def test_too_few_samples_to_cover_the_delay_never_scale_down():
    assert decide(steady(0, 25, 30), BOUNDS, current=3, now=30) is None


@given(loads=st.lists(st.floats(0, 50), min_size=1, max_size=40), current=st.integers(1, 8),
       minimum=st.integers(0, 4), extra=st.integers(0, 4), target=st.floats(0.5, 4), delay=st.floats(0, 20))
def test_decisions_stay_within_bounds_and_never_drop_needed_replicas(loads, current, minimum, extra, target, delay):
    bounds = Bounds(minimum, max(minimum, 1) + extra, target, delay)
    current = min(current, bounds.max_replicas)
    samples = [Sample(i * 0.5, load) for i, load in enumerate(loads)]
    now = samples[-1].at
    decision = decide(samples, bounds, current, now)
    if decision is None:
        return
    assert max(minimum, 1) <= decision.replicas <= bounds.max_replicas
    if decision.replicas < current:
        assert samples[0].at <= now - delay  # the whole delay was seen...
        window = [s.load for s in samples if now - s.at <= delay]
        assert decision.replicas >= min(needed(max(window), target), bounds.max_replicas)  # ...and needs fewer
        recent = [s.load for s in samples if now - s.at <= SCALE_UP_WINDOW]
        assert decision.replicas >= min(needed(sum(recent) / len(recent), target), bounds.max_replicas)


def test_autoscaling_defaults():
    spec = DeploymentSpec(name="m", command=["serve"], min_replicas=1, max_replicas=4, scale_down_delay="2s")
    assert spec.autoscale_bounds == Bounds(1, 4, 2.0, 2.0)
