"""How long a failed job waits before its retry: the backoff formula of native session retry.

    base  = retry_delay                                         if backoff is fixed
            min(retry_delay * multiplier ** retry_count, cap)   if exponential
    delay = jitter(base)  in [base, base * (1 + jitter_ratio))
    delay = min(delay, cap)      where cap = min(max_retry_delay, 24 h)

Deterministic jitter is drawn from SHA-1 of (job id, retry count), so every process and
every Python version computes the same delay for the same retry; random jitter is uniform.
"""

from __future__ import annotations

import hashlib
import math
import random

from corral.core.retry_policy import MAX_RETRY_DELAY, Backoff, Jitter, RetryPolicy


def delay_cap(policy: RetryPolicy) -> float:
    return min(policy.max_retry_delay or MAX_RETRY_DELAY, MAX_RETRY_DELAY)


def base_delay(policy: RetryPolicy, retry_count: int) -> float:
    """The delay before jitter; exponential growth is compared in logs, so no power ever overflows."""
    assert policy.retry_delay is not None and policy.backoff_multiplier is not None
    cap = delay_cap(policy)
    if policy.backoff is not Backoff.EXPONENTIAL:
        return policy.retry_delay
    growth = retry_count * math.log(policy.backoff_multiplier)
    if math.log(policy.retry_delay) + growth >= math.log(cap):
        return cap
    return policy.retry_delay * math.exp(growth)


def jitter_fraction(job_id: int, retry_count: int) -> float:
    """A number in [0, 1) fixed by (job id, retry count): the first 8 bytes of a SHA-1, over 2**64."""
    digest = hashlib.sha1(f"{job_id}:{retry_count}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def retry_delay(policy: RetryPolicy, job_id: int, retry_count: int, rng: random.Random | None = None) -> float:
    """Seconds between the failure of try `retry_count` of job `job_id` and the creation of its retry."""
    base = base_delay(policy, retry_count)
    spread = base * (policy.jitter_ratio or 0.0)
    if policy.jitter is Jitter.DETERMINISTIC:
        delay = base + spread * jitter_fraction(job_id, retry_count)
    elif policy.jitter is Jitter.RANDOM:
        delay = base + spread * (rng or random).random()
    else:
        delay = base
    return min(delay, delay_cap(policy))


def failover_delay(failures: int, first: float, cap: float, rng: random.Random | None = None) -> float:
    """Seconds before the next try at a controller after `failures` failed tries in a row: exponential from
    `first`, doubling, capped at `cap`, with random jitter of up to half more (still capped), so that workers
    cut off together do not come back together."""
    policy = RetryPolicy(retry_delay=first, backoff=Backoff.EXPONENTIAL, backoff_multiplier=2.0,
                         max_retry_delay=cap, jitter=Jitter.RANDOM, jitter_ratio=0.5)
    return retry_delay(policy, 0, failures, rng)
