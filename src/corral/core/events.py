"""The event stream's vocabulary: what each history row is called, and which rows are safe to send.

Every state change is already a history row with an increasing id; the event stream is those
rows, typed. A row written with the event type its table row or verdict declares (RetryJobs' verdicts,
corral.core.retries.VERDICTS) is that type. Otherwise a row's subject follows from its shape (a
deployment's rows carry its id, a replica's its replica id too; a worker's own row has no job; a task's has a task id);
milestones recorded under a handler's name get their own type from one table, so a new kind of
event is one line there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# The result recorded on a new replica that takes the place of one that went away (evicted, ended).
REPLACEMENT = "REPLACEMENT"

# (subject, handler) or (subject, handler, result) -> event type. Rows not named here are
# "<subject>.state_changed" when they carry a new state (a deployment's or replica's:
# "<subject>.<new state>", as "replica.healthy"), else "<subject>.<result>" (a judged wait).
EVENT_TYPES: dict[tuple[str, ...], str] = {
    ("job", "Submit"): "job.submitted",
    ("job", "EstimateStarts"): "job.estimate_moved",  # the estimated start moved by more than the set factor
    ("job", "Notify"): "job.notification_gave_up",  # a webhook was not delivered after every try
    ("worker", "Register"): "worker.registered",
    ("worker", "Reaper"): "worker.lost",
    ("task", "Attach"): "task.attached",  # a client opened a channel into it (a terminal, an exec, a port)
    ("task", "Detach"): "task.detached",  # that channel ended: how long it lasted and why, in the message
    ("deployment", "Deploy"): "deployment.created",
    ("deployment", "Scale"): "deployment.scaled",
    ("deployment", "Undeploy"): "deployment.undeployed",
    ("replica", "ProvisioningReplica", "SUCCESS"): "replica.started",
    ("replica", "ReplicaEviction"): "replica.evicted",
    ("replica", "ScalingDeployment", REPLACEMENT): "replica.replaced",
}
# Subjects whose states are few and meaningful on their own: their type names the new state.
TYPED_BY_STATE = frozenset({"deployment", "replica"})

# A row that follows a gap in the ids may belong after a transaction that has not committed yet
# (several writers on PostgreSQL); it is held back until it is this old, then the gap is skipped.
GAP_SETTLE_SECONDS = 5.0


def subject(job_id: int | None, task_id: int | None, deployment_id: int | None = None,
            replica_id: int | None = None) -> str:
    if deployment_id is not None:
        return "replica" if replica_id is not None else "deployment"
    if job_id is None:
        return "worker"
    return "task" if task_id is not None else "job"


def event_type(job_id: int | None, task_id: int | None, handler: str, result: str, to_state: str | None,
               deployment_id: int | None = None, replica_id: int | None = None, written: str | None = None) -> str:
    """`written`: the type the row was written with (its table row's or verdict's), which wins."""
    if written:
        return written
    kind = subject(job_id, task_id, deployment_id, replica_id)
    named = EVENT_TYPES.get((kind, handler, result)) or EVENT_TYPES.get((kind, handler))
    if named:
        return named
    if to_state and kind in TYPED_BY_STATE:
        return f"{kind}.{to_state.lower()}"
    return f"{kind}.state_changed" if to_state else f"{kind}.{result.lower()}"


@dataclass(frozen=True)
class Stamp:
    """The two facts about a row the gap rule needs."""

    id: int
    at: float


def ready(after: int, rows: Sequence[Stamp], now: float, settle: float = GAP_SETTLE_SECONDS) -> int:
    """How many of `rows` (ascending ids, all above `after`) can be sent now without skipping a later commit.

    1. A row right after the previous one is ready.
    2. A row after a gap is ready once it is `settle` seconds old: the gap is a rolled-back
       transaction or pruned rows, not one still committing.
    3. Otherwise stop there; the next read starts from the last row sent.
    """
    previous = after
    for count, row in enumerate(rows):
        if row.id != previous + 1 and row.at > now - settle:
            return count
        previous = row.id
    return len(rows)
