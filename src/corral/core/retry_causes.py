"""The retry policy's words, with no pydantic: how delays grow, their jitter, and the causes a job fails for
(`corral submit` offers them as choices without loading the policy's model)."""

from __future__ import annotations

from enum import StrEnum


class Backoff(StrEnum):
    FIXED = "fixed"
    EXPONENTIAL = "exponential"


class Jitter(StrEnum):
    NONE = "none"
    DETERMINISTIC = "deterministic"
    RANDOM = "random"


class FailureCause(StrEnum):
    """Why a job ended other than SUCCEEDED, as `classify_failure` reads it from what the job recorded."""

    AGENT_TRANSIENT = "agent_transient"
    SCHEDULER_TIMEOUT = "scheduler_timeout"
    BUILD_FAILURE = "build_failure"
    ENVIRONMENT_BUILD_FAILED = "environment_build_failed"
    NONZERO_EXIT = "nonzero_exit"
    OOM_KILLED = "oom_killed"
    UNKNOWN = "unknown"
    USER_CANCELLED = "user_cancelled"
    VALIDATION_ERROR = "validation_error"
    QUOTA_EXCEEDED = "quota_exceeded"


# Permanent by definition: no policy can opt them into a retry. An environment that failed to build would fail
# again from the same inputs (a requirement that does not resolve, a broken wheel): the job must change first.
NEVER_RETRIED = frozenset({FailureCause.USER_CANCELLED, FailureCause.VALIDATION_ERROR,
                           FailureCause.QUOTA_EXCEEDED, FailureCause.ENVIRONMENT_BUILD_FAILED})
RETRIABLE_CAUSES = frozenset(set(FailureCause) - NEVER_RETRIED)
