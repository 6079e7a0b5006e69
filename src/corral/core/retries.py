"""RetryJobs: the lifecycle handler that re-creates failed jobs as a chain of fresh child jobs.

A job that carries a retry policy (max_retries > 0) is ARMED. Once it has ended (FAILED,
LOST, UNSCHEDULABLE, CANCELLED or SUCCEEDED), the handler decides, in this order:

1. it SUCCEEDED                                   -> DONE (a retry that succeeded is counted)
2. its cause is never retried, or not eligible    -> NOT_RETRIED
3. it has used its retries (retry_count >= max)   -> EXHAUSTED (job.retry_exhausted)
4. otherwise                                      -> SCHEDULED at end + backoff delay (job.retry_scheduled)

and a SCHEDULED job whose due time has come is DISPATCHED: its child is created. No loop
sleeps on a delay: the due time is a column, so a restarted controller finds every pending
retry where it left it. Pure code; the store edge is controller/retries.py.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from corral.core.backoff import retry_delay
from corral.core.failure import JobEnd, classify_failure
from corral.core.lifecycle import SchedulingResult
from corral.core.retry_policy import NEVER_RETRIED, FailureCause, RetryPolicy
from corral.core.states import Fact, JobState, Move, Transitions, moves

NAME = "RetryJobs"
MAX_KEY_LENGTH = 200  # the idempotency_key column


class RetryState(StrEnum):
    """Where a job stands in its retry chain (the jobs.retry_state column)."""

    ARMED = "armed"  # has a policy; not ended, or not decided yet
    SCHEDULED = "scheduled"  # its retry is due at retry_due_at
    RETRIED = "retried"  # its child exists
    EXHAUSTED = "exhausted"  # failed with no retry left
    NOT_RETRIED = "not_retried"  # failed for a cause the policy does not retry
    DONE = "done"  # succeeded


class Verdict(StrEnum):
    DONE = "done"
    NOT_RETRIED = "not_retried"
    EXHAUSTED = "exhausted"
    SCHEDULED = "scheduled"
    DISPATCH = "dispatch"


@dataclass(frozen=True)
class VerdictEffect:
    """What a verdict does: the retry state it leaves, its history record's result, and the event that record is
    (written on the record, so a verdict and its event cannot disagree)."""

    retry_state: RetryState
    result: SchedulingResult
    event: str


# The verdicts as data: the code applies this table, and docs/states.md renders it.
VERDICTS: dict[Verdict, VerdictEffect] = {
    Verdict.DONE: VerdictEffect(RetryState.DONE, SchedulingResult.SUCCESS, "job.retry_succeeded"),
    Verdict.NOT_RETRIED: VerdictEffect(RetryState.NOT_RETRIED, SchedulingResult.SKIPPED, "job.not_retried"),
    Verdict.EXHAUSTED: VerdictEffect(RetryState.EXHAUSTED, SchedulingResult.GIVE_UP, "job.retry_exhausted"),
    Verdict.SCHEDULED: VerdictEffect(RetryState.SCHEDULED, SchedulingResult.NEED_RETRY, "job.retry_scheduled"),
    Verdict.DISPATCH: VerdictEffect(RetryState.RETRIED, SchedulingResult.SUCCESS, "job.retry_dispatched"),
}


# A job's retry state moves only by these rows: RetryJobs' verdicts (a dispatch from SCHEDULED, the others from
# ARMED), a user's cancel of a scheduled retry, and RetryJobs giving up on a job it keeps failing on.
RETRY_TRANSITIONS = Transitions("retry chain", [
    *[Move(RetryState.SCHEDULED if verdict is Verdict.DISPATCH else RetryState.ARMED, effect.retry_state, NAME,
           f"verdict {verdict}") for verdict, effect in VERDICTS.items()],
    *moves(RetryState.SCHEDULED, RetryState.NOT_RETRIED, NAME, "its retry key is taken by another job"),
    *moves(RetryState.SCHEDULED, RetryState.NOT_RETRIED, Fact.CANCEL, "a user cancelled its scheduled retry"),
    *moves(frozenset({RetryState.ARMED, RetryState.SCHEDULED}), RetryState.NOT_RETRIED, Fact.SET_ASIDE,
           "RetryJobs kept failing on it"),
])


@dataclass(frozen=True)
class RetryTarget:
    """A job as RetryJobs sees it; `end` is read only for an ARMED job that has ended."""

    job_id: int
    state: JobState
    retry_state: RetryState
    retry_count: int
    policy: RetryPolicy
    finished_at: float | None
    due_at: float | None
    end: JobEnd | None = None


@dataclass(frozen=True)
class RetryDecision:
    target: RetryTarget
    verdict: Verdict
    cause: FailureCause | None = None
    due_at: float | None = None

    @property
    def effect(self) -> VerdictEffect:
        return VERDICTS[self.verdict]

    @property
    def recorded(self) -> bool:
        """Every verdict is a history record, but a success only ends a chain for a retry."""
        return self.verdict is not Verdict.DONE or self.target.retry_count > 0

    def message(self) -> str:
        """The sentence of the history record (the event's text)."""
        t, policy = self.target, self.target.policy
        tries = f"attempt {t.retry_count + 1} of {(policy.max_retries or 0) + 1}"
        return {
            Verdict.DONE: f"{tries} succeeded",
            Verdict.NOT_RETRIED: f"{tries} ended {t.state} ({self.cause}); {self.cause} is not retried",
            Verdict.EXHAUSTED: f"{tries} ended {t.state} ({self.cause}); no retry left",
            Verdict.SCHEDULED: f"{tries} ended {t.state} ({self.cause}); retry scheduled in "
                               f"{(self.due_at or 0) - (t.finished_at or 0):.3f}s",
            Verdict.DISPATCH: f"retry {t.retry_count + 1} of {policy.max_retries} created",
        }[self.verdict]


def decide(target: RetryTarget, now: float, rng: random.Random | None = None) -> RetryDecision | None:
    """What RetryJobs does with one target now; None: nothing yet (not ended, or not due)."""
    if target.retry_state is RetryState.SCHEDULED:
        return RetryDecision(target, Verdict.DISPATCH) if (target.due_at or 0) <= now else None
    if target.retry_state is not RetryState.ARMED or target.end is None:
        return None
    if target.state is JobState.SUCCEEDED:
        return RetryDecision(target, Verdict.DONE)
    cause = classify_failure(target.end)
    if cause in NEVER_RETRIED or cause not in (target.policy.eligible_causes or ()):
        return RetryDecision(target, Verdict.NOT_RETRIED, cause)
    if target.retry_count >= (target.policy.max_retries or 0):
        return RetryDecision(target, Verdict.EXHAUSTED, cause)
    ended = target.finished_at if target.finished_at is not None else now
    due = ended + retry_delay(target.policy, target.job_id, target.retry_count, rng)
    return RetryDecision(target, Verdict.SCHEDULED, cause, due)


def child_key(root_key: str | None, root_id: int, retry_count: int) -> str:
    """The child's idempotency key, `<key>:retry:<n>` from the chain's first job, so it is created once.

    A chain without a key is named by its first job's id; a key too long for the column is hashed.
    """
    base = root_key or f"job-{root_id}"
    key = f"{base}:retry:{retry_count}"
    if len(key) > MAX_KEY_LENGTH:
        key = f"sha256-{hashlib.sha256(base.encode()).hexdigest()}:retry:{retry_count}"
    return key


def retry_state_text(retry_state: RetryState | None, retry_count: int, max_retries: int,
                     due_at: float | None, child_id: int | None) -> str | None:
    """What GET /jobs/{id} says: "attempt 2 of 4", "retry scheduled at ...", "exhausted"."""
    if retry_state is None:
        return None
    if retry_state is RetryState.SCHEDULED and due_at is not None:
        return f"retry scheduled at {datetime.fromtimestamp(due_at, UTC).isoformat(timespec='milliseconds')}"
    if retry_state is RetryState.EXHAUSTED:
        return "exhausted"
    text = f"attempt {retry_count + 1} of {max_retries + 1}"
    if retry_state is RetryState.RETRIED and child_id is not None:
        text += f"; retried as job {child_id}"
    elif retry_state is RetryState.NOT_RETRIED:
        text += "; not retried"
    return text
