"""Runs RetryJobs: reads its targets, decides in memory, and writes every outcome in one transaction.

Each decision leaves a history record of the handler RetryJobs on the job it concerns (the
table VERDICTS of core/retries.py), which is how it reaches `corral info` and the event stream:

    result NEED_RETRY  job.retry_scheduled   "attempt 1 of 4 ended FAILED (nonzero_exit); retry scheduled in 0.500s"
    result GIVE_UP     job.retry_exhausted   "attempt 4 of 4 ended FAILED (nonzero_exit); no retry left"
    result SKIPPED     not retried           "attempt 1 of 4 ended CANCELLED (user_cancelled); ... is not retried"
    result SUCCESS     retry dispatched      "retry 1 of 3 created as job 12"  (or "attempt 3 of 4 succeeded")

A dispatched child is created with the key `<key>:retry:<n>`, so a replayed pass or a second
controller can never create it twice: the key is unique, and the parent moves from
SCHEDULED to RETRIED under a fenced update in the same transaction.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from corral.core.lifecycle import SchedulingResult
from corral.core.retries import NAME, VERDICTS, RetryDecision, RetryState, Verdict, VerdictEffect, child_key, decide
from corral.core.spec import JobSpec
from corral.core.states import Fact
from corral.core.wire import STORED
from corral.engine.fencing import note_fenced
from corral.engine.target_errors import FailedOn, TargetErrors
from corral.metrics import RETRY_EXHAUSTED, RETRY_SCHEDULED, RETRY_SUCCEEDED
from corral.store.changes import ChangeSet, StaleWrite
from corral.store.database import Conflict
from corral.store.jobs import insert_job
from corral.store.retries import job_with_key, next_due, retry_parent, retry_targets
from corral.store.store import Store

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

log = logging.getLogger("corral.retries")


@dataclass
class RetryReport:
    changed: bool = False
    created: list[int] = field(default_factory=list)  # child job ids
    next_due: float | None = None  # when the earliest scheduled retry is due


async def run_retries(store: Store, now: float, rng: random.Random | None = None,
                      errors: TargetErrors | None = None) -> RetryReport:
    """One RetryJobs run. A child created meanwhile by a second controller rolls the run back: re-read.

    A job it fails on is set aside (see target_errors), the others proceed: deciding is pure and per job; a write
    that fails rolls back the run, which is made again without that job, so nothing about it is kept half-way.
    """
    errors = errors or TargetErrors()
    failed: dict[int, BaseException | str] = {}
    while True:
        try:
            return await _run(store, now, rng, errors, failed)
        except FailedOn as failure:
            if failure.target in failed:  # left out, and still written about: not the job's doing
                raise failure.error from None
            failed[failure.target] = failure.error
        except Conflict as error:
            note_fenced(NAME, error, log)  # a retry child created by another controller: re-read
            return RetryReport(changed=True)


async def _run(store: Store, now: float, rng: random.Random | None, errors: TargetErrors,
               failed: dict[int, BaseException | str]) -> RetryReport:
    async with store.write(NAME) as connection:
        targets = [t for t in await retry_targets(connection, now, failed) if t.job_id not in failed]
        decisions = _each(targets, lambda t: t.job_id, lambda t: decide(t, now, rng), failed)
        # A retry already due when it is scheduled (decided late, or no delay) is created in the same run.
        decisions += _each(decisions, lambda d: d.target.job_id, lambda d: _dispatch_if_due(d, now), failed)
        report = RetryReport(changed=bool(decisions))
        changes = ChangeSet(now)
        for decision in decisions:
            try:
                child = await _apply(connection, decision, changes)
            except (Conflict, StaleWrite):
                raise  # about the run (another controller), not about this job
            except Exception as error:
                raise FailedOn(decision.target.job_id, error) from error
            if child is not None:
                report.created.append(child)
        for job_id, error in errors.report(NAME, failed).items():
            report.changed = True
            if error.give_up:
                changes.retry(job_id, frozenset({RetryState.ARMED, RetryState.SCHEDULED}), RetryState.NOT_RETRIED,
                              by=Fact.SET_ASIDE)
                changes.record(job_id, NAME, SchedulingResult.GIVE_UP, None, None, error.note(NAME))
            else:
                changes.wait(job_id, NAME, None, error.note(NAME), repeated=not error.first)
        await changes.flush(connection)
        report.next_due = await next_due(connection)
    for decision in decisions:
        _count(decision)
    return report


def _each(items: list, job_of: Callable, decide_one: Callable, failed: dict) -> list[RetryDecision]:
    """The decision about each item, where there is one; the job of an item it raises about goes to `failed`."""
    decisions = []
    for item in items:
        try:
            decision = decide_one(item)
        except Exception as error:
            failed[job_of(item)] = error
            continue
        if decision:
            decisions.append(decision)
    return decisions


def _dispatch_if_due(decision: RetryDecision, now: float) -> RetryDecision | None:
    if decision.verdict is not Verdict.SCHEDULED:
        return None
    scheduled = replace(decision.target, retry_state=RetryState.SCHEDULED, due_at=decision.due_at, end=None)
    return decide(scheduled, now)


async def _apply(connection: AsyncConnection, decision: RetryDecision, changes: ChangeSet) -> int | None:
    """Add one decision to `changes`; returns the child created by a dispatch."""
    target = decision.target
    log.info("job=%s retry %s: %s", target.job_id, decision.verdict, decision.message())
    if decision.verdict is Verdict.DISPATCH:
        return await _dispatch(connection, decision, changes)
    columns: dict = {}
    if decision.cause is not None:
        columns["retry_cause"] = decision.cause
    if decision.verdict is Verdict.SCHEDULED:
        columns["retry_due_at"] = decision.due_at
    changes.retry(target.job_id, target.retry_state, decision.effect.retry_state, by=NAME, **columns)
    if decision.recorded:
        record_verdict(changes, decision, decision.effect, decision.message())
    return None


async def _dispatch(connection: AsyncConnection, decision: RetryDecision, changes: ChangeSet) -> int | None:
    """The child: the parent's spec and policy, one further down the chain, keyed to be created once."""
    parent, root_key = await retry_parent(connection, decision.target.job_id)
    root_id = parent.retry_root_id or parent.id
    count = parent.retry_count + 1
    key = child_key(root_key, root_id, count)
    taken = await job_with_key(connection, key)
    if taken is not None:  # a job submitted by hand with this very key: never take it over
        changes.retry(parent.id, RetryState.SCHEDULED, RetryState.NOT_RETRIED, by=NAME)
        record_verdict(changes, decision, VERDICTS[Verdict.NOT_RETRIED],
                f"its retry key {key!r} is taken by job {taken}; not retried")
        return None
    note = (f"retry {count} of {parent.max_retries} of job {parent.id} ({parent.retry_cause}); "
            f"attempt {count + 1} of {parent.max_retries + 1}")
    child_id = await insert_job(
        connection, JobSpec.model_validate(parent.spec, context=STORED), key, changes.now, created_by=NAME, note=note,
        name=parent.name, launched_by=parent.launched_by,  # a launched job's retry stays in its launch tree
        owner=parent.owner,
        parent_job_id=parent.id, retry_root_id=root_id, retry_count=count, max_retries=parent.max_retries,
        retry_policy=parent.retry_policy, retry_cause=parent.retry_cause, retry_state=RetryState.ARMED)
    changes.retry(parent.id, RetryState.SCHEDULED, RetryState.RETRIED, by=NAME)
    record_verdict(changes, decision, decision.effect, f"{decision.message()} as job {child_id}")
    changes.audit(at=changes.now, actor="controller", action="job.retry_dispatched", job_id=child_id, detail=dict(
        auto=True, parent_job_id=parent.id, cause=parent.retry_cause, attempt=count + 1,
        attempts=parent.max_retries + 1, due_at=decision.target.due_at, idempotency_key=key))
    return child_id


def record_verdict(changes: ChangeSet, decision: RetryDecision, effect: VerdictEffect, message: str) -> None:
    """The history record of a verdict, written with the event type the verdict declares."""
    changes.record(decision.target.job_id, NAME, effect.result, decision.target.state, None, message,
                   event=effect.event)


def _count(decision: RetryDecision) -> None:
    cause = str(decision.cause)
    if decision.verdict is Verdict.SCHEDULED:
        RETRY_SCHEDULED.labels(cause).inc()
    elif decision.verdict is Verdict.EXHAUSTED:
        RETRY_EXHAUSTED.labels(cause).inc()
    elif decision.verdict is Verdict.DONE and decision.target.retry_count > 0:
        RETRY_SUCCEEDED.inc()
