"""What would it take: the smallest changes that would let a pending job start sooner, each with its new estimate.

Pure, over a forecast's `Situation`: each remedy is the situation with one part of the job changed
(its request, pool, a constraint, its priority) or one job of its project cancelled, forecast
again while watching the job. Only remedies that start meaningfully sooner are kept (now, or at
least a tenth of the wait and a minute sooner); a job that could never start keeps those that
make it startable.

A forecast over 10k pending units can take half a second, so their number is bounded: one for
the baseline; for a count (GPUs, cores, a priority) one at the largest change, and if that helps
a binary search for the smallest change that starts as soon (about log2 of the candidates); one
for less memory (only where memory binds); one per other pool that could hold the job; per label
constraint one to drop it and, if that helps, one per other value of its label (at most
MAX_VALUES); one to cancel the job it waits for. Each is cut off at the latest start that would
still count, so one that does not help stops early. All in all at most MAX_FORECASTS.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from corral.core.config import Sequencer
from corral.core.constraints import Constraint
from corral.core.spec_text import format_bytes
from corral.scheduling.capacity import CapacityIndex
from corral.scheduling.forecast import HORIZON, MIN_STEP, Ending, Estimate, Situation
from corral.scheduling.placement import Unit, place_over
from corral.scheduling.reasons import NoRoom, TooLarge
from corral.scheduling.rooms import EPS
from corral.scheduling.snapshot import JobEnd, gate

MIN_GAIN = 60.0  # seconds: a remedy starts at least this much sooner than the baseline...
GAIN_SHARE = 0.1  # ...and at least this share of the baseline's wait sooner (or now)
MAX_REMEDIES = 6
MAX_VALUES = 3  # other values of a label tried in place of a constraint's
MAX_POOLS = 2  # other pools listed
MAX_FORECASTS = 40
GB = 10**9  # memory remedies ask whole gigabytes, as `--memory 24G` reads them
MAX_PRIORITY = 1000  # the highest priority a spec may ask

# The order remedies are listed in, smallest change first: where the job runs, then what it asks, then what it does
# to other jobs (its priority over theirs, cancelling one).
KINDS = ("constraint", "pool", "drop-constraint", "gpus", "cpus", "memory", "priority", "cancel")


@dataclass(frozen=True)
class Remedy:
    kind: str  # one of KINDS
    change: str  # in words, as the CLI flag says it: "--gpus 4 instead of 8"
    spec: dict  # the spec fields it sets: {"resources": {"gpu": 4}}; empty for a cancel
    estimate: Estimate
    workers: tuple[str, ...] = ()  # where it starts, when it starts now (the first unit's workers)
    preempts: tuple[int, ...] = ()  # the jobs it would preempt now
    cancel: int | None = None  # the job a cancel remedy cancels
    size: float = 0.0  # within a kind, how much it changes (the share of a request given up)


Found = tuple[Remedy, Situation]  # a remedy and the situation it forecast


@dataclass(frozen=True)
class WhatIf:
    baseline: Estimate
    remedies: tuple[Remedy, ...] = ()
    forecasts: int = 1  # the forecasts it took, the baseline's included


def what_if(situation: Situation, job_id: int) -> WhatIf:
    """The job's estimate and the remedies that would start it meaningfully sooner, smallest change first.
    A ValueError if the job has no pending unit in the situation."""
    return _Trials(situation, job_id).run()


def clearly_before(start: float | None, other: float | None, now: float) -> bool:
    """Whether `start` is meaningfully sooner than `other` (None: never, or past the horizon): now where the other
    is later, or at least MIN_GAIN and GAIN_SHARE of the other's wait sooner."""
    if start is None:
        return False
    if other is None:
        return True
    if other <= now + MIN_STEP:
        return False
    if start <= now + MIN_STEP:
        return True
    return other - start >= max(MIN_GAIN, GAIN_SHARE * (other - now))


class _Trials:
    def __init__(self, situation: Situation, job_id: int) -> None:
        self.situation, self.job_id, self.now = situation, job_id, situation.now
        self.mine = [item for item in situation.waiting if item.unit.job_id == job_id]
        if not self.mine:
            raise ValueError(f"job {job_id} has no pending task")
        self.first = self.mine[0].unit
        self.forecasts = 0
        self.baseline = self._estimate(situation, HORIZON)

    def run(self) -> WhatIf:
        found: list[Found] = []
        if not self._starts_now(self.baseline):
            for remedies_of in (self._constraints, self._pools, self._gpus, self._cpus, self._memory,
                                self._priority, self._cancel):
                found += remedies_of()
        found.sort(key=lambda f: (KINDS.index(f[0].kind), f[0].size, f[0].estimate.start_at or math.inf))
        remedies = tuple(self._described(remedy, situation) for remedy, situation in found[:MAX_REMEDIES])
        return WhatIf(self.baseline, remedies, self.forecasts)

    # The kinds of remedy ------------------------------------------------------------------------

    def _gpus(self) -> list[Found]:
        gpus = self.first.request.gpu
        if gpus <= 1 or self.first.request.share:
            return []
        return self._fewest("gpus", list(range(1, int(gpus))), lambda n: self._with_request(gpu=n),
                            lambda n: (f"--gpus {n} instead of {int(gpus)}", {"resources": {"gpu": n}}, 1 - n / gpus))

    def _cpus(self) -> list[Found]:
        cpus = self.first.request.cpu
        return self._fewest("cpus", list(range(1, math.ceil(cpus - EPS))), lambda n: self._with_request(cpu=float(n)),
                            lambda n: (f"--cpus {n} instead of {cpus:g}", {"resources": {"cpu": n}}, 1 - n / cpus))

    def _memory(self) -> list[Found]:
        """Only where memory is what binds: as much as the roomiest worker has (free now, or in all if the job is
        too large), in whole gigabytes."""
        memory = self.first.request.memory
        bound = self._memory_bound()
        amount = int(bound // GB) * GB if bound is not None else 0
        if not 0 < amount < memory:
            return []
        situation = self._with_request(memory=amount)
        return self._kept(Remedy("memory", f"--memory {_size(amount)} instead of {_size(memory)}",
                                 {"resources": {"memory": amount}}, self._try(situation), size=1 - amount / memory),
                          situation)

    def _pools(self) -> list[Found]:
        """Each other pool that could hold it is tried; the MAX_POOLS that start soonest are kept."""
        found: list[Found] = []
        for pool in self._other_pools():
            situation = self._with_unit(pool=pool)
            found += self._kept(Remedy("pool", f"--pool {pool} instead of {self.first.pool}", {"pool": pool},
                                       self._try(situation)), situation)
        return sorted(found, key=lambda f: f[0].estimate.start_at or math.inf)[:MAX_POOLS]

    def _constraints(self) -> list[Found]:
        """Per label constraint: dropping it, and if that helps, the other value of its label that starts soonest."""
        labels = [c for c in self.first.constraints if isinstance(c, Constraint)]
        found: list[Found] = []
        for constraint in labels:
            situation = self._with_constraint(constraint, None)
            dropped = self._kept(Remedy("drop-constraint", f"drop --constraint {constraint}",
                                        {"constraints": [str(c) for c in labels if c != constraint]},
                                        self._try(situation)), situation)
            if not dropped:
                continue  # no other value of the label would help either
            found += dropped
            instead: list[Found] = []
            for value in self._other_values(constraint) if constraint.op != "!=" else ():
                other = Constraint(constraint.key, "=", (value,))
                situation = self._with_constraint(constraint, other)
                instead += self._kept(Remedy(
                    "constraint", f"--constraint {other} instead of {constraint}",
                    {"constraints": [str(other if c == constraint else c) for c in labels]}, self._try(situation)),
                    situation)
            found += sorted(instead, key=lambda f: f[0].estimate.start_at or math.inf)[:1]
        return found

    def _priority(self) -> list[Found]:
        """The smallest priority that starts as soon as the highest that matters: one above each priority of a job
        that waits or holds room in its pool (up to the highest a spec may ask)."""
        mine, pool = self.first.priority, self.first.pool
        if self.baseline.never or self.situation.policy.pool(pool).sequencer is Sequencer.FIFO:
            return []  # no priority makes room appear; a FIFO pool neither orders nor preempts by it
        workers = {room.id for room in self.situation.rooms if room.pool == pool}
        others = {item.unit.priority for item in self.situation.waiting
                  if item.unit.pool == pool and item.unit.job_id != self.job_id}
        others |= {e.task.priority for e in self.situation.ending if e.task.worker_id in workers}
        levels = sorted((p + 1 for p in others if mine <= p < MAX_PRIORITY), reverse=True)  # largest change first
        return self._fewest("priority", levels, lambda p: self._with_unit(priority=p),
                            lambda p: (f"--priority {p} instead of {mine}", {"priority": p}, 0.0))

    def _cancel(self) -> list[Found]:
        """Cancelling the job whose end frees its room, if it is of the same project and not one this job needs to
        succeed."""
        other = self.baseline.after_job
        if other is None or other in self.mine[0].job.after:
            return []
        projects = {e.task.project for e in self.situation.ending if e.task.job_id == other}
        projects |= {item.unit.project for item in self.situation.waiting if item.unit.job_id == other}
        if projects != {self.first.project}:
            return []
        situation = self._without(other)
        return self._kept(Remedy("cancel", f"cancel job {other}", {}, self._try(situation), cancel=other), situation)

    # Changed situations ---------------------------------------------------------------------

    def _with_unit(self, **changes: object) -> Situation:
        return dataclasses.replace(self.situation, waiting=tuple(
            dataclasses.replace(item, unit=dataclasses.replace(item.unit, **changes))
            if item.unit.job_id == self.job_id else item for item in self.situation.waiting))

    def _with_constraint(self, constraint: Constraint, other: Constraint | None) -> Situation:
        """With `constraint` replaced by `other`, or dropped."""
        return self._with_unit(constraints=tuple(other if c == constraint else c for c in self.first.constraints
                                                 if c != constraint or other is not None))

    def _with_request(self, **changes: object) -> Situation:
        return self._with_unit(request=dataclasses.replace(self.first.request, **changes))

    def _without(self, other: int) -> Situation:
        """The situation had `other` been cancelled now: its room free, its pending tasks gone, it ended."""
        rooms = {room.id: room.copy() for room in self.situation.rooms}
        ending: list[Ending] = []
        for e in self.situation.ending:
            if e.task.job_id != other:
                ending.append(e)
            elif e.task.worker_id in rooms:
                rooms[e.task.worker_id].give(e.task.request, e.task.gpu_ids)
        return dataclasses.replace(
            self.situation, rooms=tuple(rooms.values()), ending=tuple(ending),
            waiting=tuple(item for item in self.situation.waiting if item.unit.job_id != other),
            dependencies={**self.situation.dependencies, other: JobEnd("CANCELLED", self.now)})

    # Searching ------------------------------------------------------------------------------

    def _fewest(self, kind: str, values: Sequence[Any], changed: Callable[[Any], Situation],
                describe: Callable[[Any], tuple[str, dict, float]]) -> list[Found]:
        """Of `values`, ordered from the largest change to the smallest, the last that starts as soon as the first
        does, if the first starts meaningfully sooner than the baseline (a binary search: a smaller change is taken
        to start no sooner)."""
        if not values:
            return []
        best = self._try(changed(values[0]))
        if not clearly_before(best.start_at, self.baseline.start_at, self.now):
            return []
        found, lo, hi = (values[0], best), 1, len(values) - 1
        while lo <= hi:
            middle = (lo + hi) // 2
            estimate = self._try(changed(values[middle]), within=best.start_at)
            if estimate.start_at is not None and not clearly_before(best.start_at, estimate.start_at, self.now):
                found, lo = (values[middle], estimate), middle + 1
            else:
                hi = middle - 1
        value, estimate = found
        change, spec, size = describe(value)
        return [(Remedy(kind, change, spec, estimate, size=size), changed(value))]

    def _kept(self, remedy: Remedy, situation: Situation) -> list[Found]:
        """The remedy, if it starts meaningfully sooner than the baseline."""
        return [(remedy, situation)] if clearly_before(remedy.estimate.start_at, self.baseline.start_at,
                                                        self.now) else []

    def _try(self, situation: Situation, within: float | None = None) -> Estimate:
        """The job's estimate in a changed situation, forecast only as far as a start could still count: clearly
        before the baseline, or (`within`) not clearly after that start. Past MAX_FORECASTS: no start."""
        if self.forecasts >= MAX_FORECASTS:
            return Estimate(self.job_id, None)
        if within is not None:
            wait = within - self.now
            latest = 0.0 if wait <= MIN_STEP else max(wait + MIN_GAIN, wait / (1 - GAIN_SHARE))
        elif self.baseline.start_at is None:
            latest = HORIZON
        else:
            wait = self.baseline.start_at - self.now
            latest = max(0.0, wait - max(MIN_GAIN, GAIN_SHARE * wait))
        return self._estimate(situation, min(latest + MIN_STEP, HORIZON))

    def _estimate(self, situation: Situation, horizon: float) -> Estimate:
        self.forecasts += 1
        return situation.forecast(horizon=horizon, watch=self.job_id).get(self.job_id, Estimate(self.job_id, None))

    # What the situation says ------------------------------------------------------------------

    def _starts_now(self, estimate: Estimate) -> bool:
        return estimate.start_at is not None and estimate.start_at <= self.now + MIN_STEP

    def _memory_bound(self) -> float | None:
        """The most memory one task could have where memory is what keeps the job waiting, or None."""
        reason = self.baseline.reason
        if not isinstance(reason, TooLarge):
            reason = self._alone_now()
        if isinstance(reason, TooLarge | NoRoom) and reason.resource == "memory":
            return reason.largest if isinstance(reason, TooLarge) else reason.most_free
        return None

    def _alone_now(self) -> object:
        """Why the job's first unit would wait now with the room as it is, were it alone in the queue."""
        index = CapacityIndex(self.situation.rooms, [e.task for e in self.situation.ending])
        placement = place_over([self.first], index, policy=self.situation.policy, now=self.now)
        return placement.waiting.get(self.first.key)

    def _other_pools(self) -> list[str]:
        """The pools, other than its own, with a worker that meets its constraints and could ever hold a task."""
        request, constraints = self.first.request, self.first.constraints
        pools = {room.pool for room in self.situation.rooms if room.pool != self.first.pool
                 and all(c.admits(room) for c in constraints) and room.could_ever_fit(request)}
        return sorted(pools)

    def _other_values(self, constraint: Constraint) -> list[str]:
        """The values of the constraint's label, on workers of the pool that meet the job's other constraints and
        could hold a task, that the constraint refuses: those on the most workers first."""
        request = self.first.request
        values: Counter[str] = Counter()
        for room in self.situation.rooms:
            value = room.labels.get(constraint.key)
            if (value is not None and room.pool == self.first.pool and not constraint.admits(room)
                    and room.could_ever_fit(request)
                    and all(c.admits(room) for c in self.first.constraints if c != constraint)):
                values[value] += 1
        return [value for value, _ in values.most_common(MAX_VALUES)]

    def _placed_now(self, situation: Situation) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """Where the job's first unit to be placed goes in a pass now, and whom that pass preempts for it."""
        index = CapacityIndex(situation.rooms, [e.task for e in situation.ending])
        placement = place_over(self._ahead(situation), index, policy=situation.policy, now=self.now)
        names = {room.id: room.name for room in situation.rooms}
        mine = [item.unit for item in situation.waiting if item.unit.job_id == self.job_id]
        workers = next((tuple(dict.fromkeys(names[a.worker_id] for a in placement.assignments[unit.key]))
                        for unit in mine if unit.key in placement.assignments), ())
        victims = {task.job_id for unit in mine for task in placement.victims.get(unit.key, ())}
        return workers, tuple(sorted(victims))

    def _ahead(self, situation: Situation) -> list[Unit]:
        """The units a pass now offers room before the job's last (they alone change where it goes): of its pool,
        ready now, ahead of it in its sequencer's order (under fair share, all of them)."""
        mine = next(item.unit for item in situation.waiting if item.unit.job_id == self.job_id)
        sequencer = situation.policy.pool(mine.pool).sequencer
        ready = [(n, item.unit) for n, item in enumerate(situation.waiting) if item.unit.pool == mine.pool
                 and gate(item.job, situation.dependencies, self.now) is None]
        if sequencer is Sequencer.FAIR_SHARE:
            return [unit for _, unit in ready]
        last = max((n for n, unit in ready if unit.job_id == self.job_id), default=None)
        if last is None:  # held back by its dependencies or begin time
            return []
        if sequencer is Sequencer.FIFO:
            return [unit for n, unit in ready if n <= last]
        return [unit for n, unit in ready if (-unit.priority, n) <= (-mine.priority, last)]

    def _described(self, remedy: Remedy, situation: Situation) -> Remedy:
        """With where it starts and whom it preempts, when it starts now or is the priority remedy."""
        if not self._starts_now(remedy.estimate) and remedy.kind != "priority":
            return remedy
        workers, preempts = self._placed_now(situation)
        return dataclasses.replace(remedy, workers=workers, preempts=preempts)


def _size(amount: float) -> str:
    return format_bytes(amount, compact=True)

