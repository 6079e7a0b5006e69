"""The backoff formula: each branch, the jitter modes, the 24 h ceiling."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.core.backoff import base_delay, delay_cap, jitter_fraction, retry_delay
from corral.core.retry_policy import MAX_RETRY_DELAY, RetryPolicy, effective_policy


def policy(**fields) -> RetryPolicy:
    return effective_policy([RetryPolicy(**fields)])


def test_fixed_backoff_waits_the_same_delay_every_time():
    p = policy(retry_delay=30, backoff="fixed", jitter="none")
    assert [retry_delay(p, 7, n) for n in range(4)] == [30, 30, 30, 30]


def test_exponential_backoff_multiplies_by_retry_count():
    p = policy(retry_delay=2, backoff="exponential", backoff_multiplier=3, max_retry_delay=1000, jitter="none")
    assert [retry_delay(p, 7, n) for n in range(4)] == pytest.approx([2, 6, 18, 54])


def test_exponential_backoff_stops_at_max_retry_delay():
    p = policy(retry_delay=10, backoff="exponential", backoff_multiplier=2, max_retry_delay=50, jitter="none")
    assert [retry_delay(p, 7, n) for n in range(5)] == pytest.approx([10, 20, 40, 50, 50])


def test_a_huge_retry_count_does_not_overflow():
    p = policy(retry_delay=1, backoff="exponential", backoff_multiplier=100, jitter="none")
    assert base_delay(p, 10**6) == p.max_retry_delay


def test_max_retry_delay_above_a_day_is_held_to_a_day():
    p = policy(retry_delay=1, backoff="exponential", backoff_multiplier=10, max_retry_delay="7d", jitter="none")
    assert p.max_retry_delay == MAX_RETRY_DELAY
    assert retry_delay(p, 1, 50) == MAX_RETRY_DELAY


def test_a_fixed_delay_above_a_day_is_held_to_a_day():
    p = policy(retry_delay="3d", max_retry_delay="3d", jitter="none")
    assert retry_delay(p, 1, 0) == MAX_RETRY_DELAY


@given(delay=st.floats(0.001, 10**7), multiplier=st.floats(1, 100), cap=st.floats(0.001, 10**7),
       count=st.integers(0, 10_000), jitter=st.sampled_from(["none", "deterministic", "random"]),
       ratio=st.floats(0, 1), backoff=st.sampled_from(["fixed", "exponential"]), job_id=st.integers(1, 2**40))
def test_no_delay_exceeds_the_cap_or_falls_below_zero(delay, multiplier, cap, count, jitter, ratio, backoff,
                                                      job_id):
    p = policy(retry_delay=delay, backoff_multiplier=multiplier, max_retry_delay=cap, jitter=jitter,
               jitter_ratio=ratio, backoff=backoff)
    assert 0 < retry_delay(p, job_id, count, random.Random(1)) <= min(cap, MAX_RETRY_DELAY)
    assert delay_cap(p) <= MAX_RETRY_DELAY


def test_no_jitter_is_the_base():
    p = policy(retry_delay=10, jitter="none", jitter_ratio=0.5)
    assert retry_delay(p, 3, 0) == 10


def test_deterministic_jitter_is_in_range_and_the_same_for_the_same_job_and_count():
    p = policy(retry_delay=100, jitter="deterministic", jitter_ratio=0.25, max_retry_delay=1000)
    delays = {(job, n): retry_delay(p, job, n) for job in range(1, 50) for n in range(3)}
    assert all(100 <= d < 125 for d in delays.values())
    assert delays == {(job, n): retry_delay(p, job, n) for job in range(1, 50) for n in range(3)}
    assert len(set(delays.values())) == len(delays)  # spread, not a constant offset


def test_deterministic_jitter_is_fixed_across_processes_and_versions():
    """SHA-1 of "job:count", not hash(): a pinned value, and a fresh interpreter with random hash seed agrees."""
    assert jitter_fraction(42, 1) == 0xE495B0E6E6C5E62E / 2**64  # sha1(b"42:1"), first 8 bytes
    code = "from corral.core.backoff import jitter_fraction; print(repr(jitter_fraction(42, 1)))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "12345"}).stdout.strip()
    assert float(other) == jitter_fraction(42, 1)


def test_random_jitter_is_uniform_in_base_to_base_times_one_plus_ratio():
    p = policy(retry_delay=10, jitter="random", jitter_ratio=0.5, max_retry_delay=100)
    rng = random.Random(7)
    delays = [retry_delay(p, 1, 0, rng) for _ in range(2000)]
    assert all(10 <= d < 15 for d in delays)
    assert min(delays) < 10.1 and max(delays) > 14.9
    assert 12.3 < sum(delays) / len(delays) < 12.7


def test_jitter_never_pushes_past_the_cap():
    p = policy(retry_delay=100, jitter="deterministic", jitter_ratio=1, max_retry_delay=100)
    assert retry_delay(p, 9, 0) == 100
