"""Start estimates for every pending job, refreshed every few seconds (corral.scheduling.forecast does the work).

A pass reads the pending work and the cluster as ScheduleJobs would, says how long each running
and pending task runs (corral.scheduling.durations: its time limit, else what similar jobs took),
builds its situation and simulates ahead off the event loop, and writes only the estimates that moved.
On PostgreSQL with several controllers the write holds the EstimateStarts lock and a pass is skipped when another
controller's estimates are fresh. A job whose start moved by more than the notification factor gets
a history row (job.estimate_moved), which its webhook hears of.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field

from corral.core.estimates import MOVE_FACTOR, horizon_of, moved, moved_by_factor, moved_message, start_text
from corral.core.lifecycle import Target
from corral.core.states import JobState
from corral.engine.coordinator import may_have_targets, pending_work
from corral.engine.handlers import ScheduleJobs, Snapshot, pending_unit, task_request, unit_fields
from corral.metrics import ESTIMATE_ERROR_SECONDS, ESTIMATE_SECONDS
from corral.scheduling.durations import WAITING, Duration, DurationModel, Still, share_of
from corral.scheduling.forecast import HORIZON, Ending, Estimate, Situation, Waiting
from corral.scheduling.preemption import RunningTask
from corral.scheduling.reasons import TooLarge
from corral.scheduling.rooms import Request
from corral.scheduling.snapshot import JobPlacement, eligible_since
from corral.store.estimates import (
    ESTIMATOR,
    JobDurationFacts,
    StoredEstimate,
    any_estimates,
    duration_facts,
    estimated_at,
    finished_runs,
    mark_estimated,
    note_moved,
    prune_records,
    read_estimates,
    settle,
    write_estimates,
)
from corral.store.reads import present_states
from corral.store.scheduling_reads import KeptCapacity
from corral.store.store import Store

log = logging.getLogger("corral.engine.estimates")

PERIOD = 5.0  # seconds between passes
LEARN_PERIOD = 60.0  # seconds between readings of the finished runs the durations are learned from
STOPPING_FOR = 15.0  # seconds a task being stopped is taken to hold its room still
RECORDS_KEPT = 365 * 86400.0  # seconds an estimate held to account stays on record (corral stats estimates)


@dataclass
class Assumed:
    """How the tasks' durations were known: per job, and counted over the running tasks."""

    by_job: dict[int, Duration] = field(default_factory=dict)
    running: Counter[str] = field(default_factory=Counter)  # "time limit" / "learned" / "guessed" -> tasks

    def basis(self, estimate: Estimate) -> str:
        """What a job's estimate rests on, in words: the job it waits for, or the running tasks as a whole."""
        if estimate.after_job is not None and estimate.after_job in self.by_job:
            return f"job {estimate.after_job}'s end: {self.by_job[estimate.after_job].basis}"
        if not self.running:
            return "nothing is running"
        counts = ", ".join(f"{n} {kind}" for kind, n in self.running.most_common())
        return f"running tasks' ends: {counts}"


class Estimator:
    """Kept by the engine across passes: the learned durations, and when they were read."""

    def __init__(self, factor: float = MOVE_FACTOR) -> None:
        self.factor = factor
        self.ended = DurationModel()  # the finished runs, read once per LEARN_PERIOD
        self.model = self.ended  # the same with the tasks running now, each pass
        self.learned_at = 0.0
        self.due = 0.0
        self.kept = KeptCapacity()  # the cluster, brought up to date from the history pass after pass
        self.facts: dict[int, JobDurationFacts] = {}  # what durations are looked up by, per job: fixed once stored
        self.wrote_at: float | None = None
        self.pending = ScheduleJobs()  # whose targets (the pending work) a pass estimates; it never runs here

    def beside(self) -> Estimator:
        """An estimator for one request (a what-if): a capacity index of its own, which nothing else moves, and the
        durations this one learned, not read again."""
        other = Estimator(self.factor)
        other.ended, other.learned_at = self.ended, self.learned_at
        return other

    async def run_if_due(self, store: Store, now: float) -> bool:
        """A pass, once per PERIOD; False when none ran (not due, or another controller's pass is fresh)."""
        if now < self.due:
            return False
        self.due = now + PERIOD
        async with store.read() as connection:
            latest = await estimated_at(connection)
            if latest is not None and latest != self.wrote_at and now - latest < PERIOD:
                return False
            if not await self._has_work(connection):
                return False
        await self.run(store, now)
        return True

    async def _has_work(self, connection) -> bool:
        """Whether a pass would estimate or clear anything: a pending job's task to place, or an estimate stored.
        Where neither (an idle cluster) it would read the cluster, simulate nothing and take the writer to write
        nothing; it is left out, as the engine leaves out a handler with no target. Not while the kept index still
        looks for history ids skipped on PostgreSQL: those are looked for only for a while, by the passes."""
        if self.kept.gaps:
            return True
        if may_have_targets(self.pending, await present_states(connection, self.pending.job_states)):
            return True
        return await any_estimates(connection)

    async def run(self, store: Store, now: float) -> dict[int, StoredEstimate]:
        """Estimate every pending job and write those that moved; returns the estimates made."""
        situation, pending_jobs, assumed = await self.situation(store, now)
        started = time.perf_counter()
        estimates = await asyncio.to_thread(situation.forecast)
        ESTIMATE_SECONDS.observe(time.perf_counter() - started)
        made = {job_id: stored_estimate(estimates[job_id], assumed, now)
                for job_id in pending_jobs if job_id in estimates}
        async with store.write(ESTIMATOR, moves_state=False) as connection:
            before = await read_estimates(connection)
            changed = [e for job_id, e in made.items() if _changed(before.get(job_id), e, now)]
            recorded = [e for e in changed if e.start_at is not None
                        and (e.job_id not in before or moved(before[e.job_id].start_at, e.start_at, now))]
            await write_estimates(connection, changed, recorded)
            await note_moved(connection, {
                e.job_id: _move_message(before[e.job_id], e, now) for e in changed
                if e.job_id in before and moved_by_factor(before[e.job_id].start_at, e.start_at, now, self.factor)},
                now)
            for record in await settle(connection):
                ESTIMATE_ERROR_SECONDS.labels(horizon_of(record.horizon)).observe(record.error)
            await prune_records(connection, now - RECORDS_KEPT)
            await mark_estimated(connection, now)
        self.wrote_at = now
        return made

    async def situation(self, store: Store, now: float) -> tuple[Situation, set[int], Assumed]:
        """What the simulation runs over, the jobs to estimate (those with nothing placed yet), and the durations
        it assumed."""
        async with store.read() as connection:
            if now - self.learned_at >= LEARN_PERIOD:
                self.ended = DurationModel(await finished_runs(connection))
                self.learned_at = now
            targets, snapshot, states = await pending_work(connection, self.pending, now, self.kept)
            running = list(snapshot.cluster.capacity().running.values())
            wanted = {t.job_id for t in targets} | {t.job_id for t in running}
            self.facts = {job_id: self.facts[job_id] for job_id in wanted if job_id in self.facts}
            self.facts.update(await duration_facts(connection, wanted - self.facts.keys()))
            facts = self.facts
        # Hundreds of milliseconds of pure CPU on a long queue: off the event loop, which answers heartbeats meanwhile.
        return await asyncio.to_thread(self._assembled, targets, snapshot, states, running, facts, now)

    def _assembled(self, targets: list[Target], snapshot: Snapshot, states: dict[int, JobState],
                   running: list[RunningTask], facts: dict[int, JobDurationFacts],
                   now: float) -> tuple[Situation, set[int], Assumed]:
        """The situation made from what was read: each task's duration looked up, the pending work as units."""
        cluster = snapshot.cluster
        self.model = self.ended.running(_still(task, facts.get(task.job_id), now) for task in running
                                        if not task.stopping)
        assumed = Assumed()
        # Equal requests as one object: the simulation tells a unit alike the one before by identity, where equal
        # objects cost a Python `Request.__eq__` each (some sixteen thousand a forecast over 10k pending).
        requests: dict[tuple, Request] = {}
        waiting = [self._waiting(target, snapshot, facts, assumed, requests) for target in targets
                   if target.job_id not in cluster.unreadable]
        ending = []
        for task in running:
            if task.stopping:
                ending.append(Ending(task, now + STOPPING_FOR))
                continue
            duration = self._duration(task.job_id, share_of(task.task_id), facts.get(task.job_id), task.request,
                                      now - task.since, assumed)
            assumed.running[_kind(duration)] += 1
            ending.append(Ending(task, max(task.since + duration.seconds, now)))
        situation = Situation(tuple(waiting), tuple(cluster.capacity().rooms), tuple(ending), now, cluster.policy,
                              cluster.dependencies)
        return situation, {job_id for job_id, state in states.items() if state is JobState.PENDING}, assumed

    def _waiting(self, target: Target, snapshot: Snapshot, facts: dict[int, JobDurationFacts],
                 assumed: Assumed, requests: dict[tuple, Request]) -> Waiting:
        """A pending unit with its duration; its request the one of `requests` equal to it (by its fields), if any."""
        cluster = snapshot.cluster
        job = cluster.jobs.get(target.job_id, JobPlacement())
        request = task_request(job, snapshot.jobs[target.job_id])
        request = requests.setdefault(request._fields, request)
        since = eligible_since(job, cluster.dependencies, target.since)
        unit = pending_unit(target, unit_fields(job, request), snapshot, since)
        duration = self._duration(target.job_id, WAITING, facts.get(target.job_id), request, 0.0, assumed)
        return Waiting(unit, duration.seconds, job)

    def _duration(self, job_id: int, share: float, job: JobDurationFacts | None, request: Request, age: float,
                  assumed: Assumed) -> Duration:
        """How long in all a task runs that has run `age` seconds (corral.scheduling.durations); the first asked of
        a job stands for it in the words of an estimate."""
        duration = self.model.duration(job.project if job else "", job.name if job else "", _shape(request), share,
                                       age, job.time_limit if job else None)
        assumed.by_job.setdefault(job_id, duration)
        return duration


def _still(task: RunningTask, job: JobDurationFacts | None, now: float) -> Still:
    """A running task as the durations learn from it: lasting at least its age."""
    return Still(job.project if job else "", job.name if job else "", _shape(task.request), now - task.since)


def _shape(request: Request) -> tuple[float, int, float]:
    return (request.cpu, request.memory, request.gpu)


def _kind(duration: Duration) -> str:
    if duration.basis == "its time limit":
        return "by time limit"
    return "guessed" if duration.basis.startswith("a guess") else "learned"


def stored_estimate(estimate: Estimate, assumed: Assumed, now: float) -> StoredEstimate:
    """A forecast's estimate as it is kept and shown: why no start is known, in words, and what it rests on."""
    unknown = None
    if estimate.start_at is None:
        if estimate.reason is None or not estimate.never:
            unknown = f"it does not start within the {HORIZON / 86400:g} days simulated"
        else:
            unknown = estimate.reason.sentence()
            if isinstance(estimate.reason, TooLarge):
                unknown = f"no worker can ever fit it: {unknown}"
    return StoredEstimate(estimate.job_id, now, estimate.start_at, estimate.all_started_at, estimate.after_job,
                          assumed.basis(estimate), unknown, estimate.never)


def _changed(before: StoredEstimate | None, after: StoredEstimate, now: float) -> bool:
    """Worth rewriting: new, moved past the noise, or now waiting on another job or for another reason."""
    if before is None:
        return True
    return (moved(before.start_at, after.start_at, now) or before.after_job != after.after_job
            or before.unknown != after.unknown)


def _move_message(before: StoredEstimate, after: StoredEstimate, now: float) -> str:
    """The history row's message: "start estimate moved: ~4m -> ~2h after job 41"."""
    def said(e: StoredEstimate) -> str:
        return start_text(e.start_at, e.after_job, e.unknown, e.never, now)
    return moved_message(said(before), said(after))
