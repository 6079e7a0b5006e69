"""The engine loop: runs the handlers in order, woken at once by events, and on a period otherwise."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from corral.core.retries import NAME as RETRY_JOBS
from corral.core.states import Fact
from corral.engine.coordinator import may_have_targets, run_handler
from corral.engine.estimates import Estimator
from corral.engine.fencing import BUSY_RETRY, FENCED, note_fenced
from corral.engine.handlers import JOB_HANDLERS
from corral.engine.reports import prune_lost_workers, reap_lost_workers
from corral.engine.retries import run_retries
from corral.engine.target_errors import TargetErrors
from corral.metrics import ENGINE_PASSES
from corral.store.estimates import ESTIMATOR
from corral.store.handler_locks import HandlerBusy
from corral.store.reads import TASK_TARGET_JOB_STATES, present_and_retries
from corral.store.retries import next_due
from corral.store.store import Store
from corral.store.worker_state import reaping_due
from corral.waiting import woken

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

log = logging.getLogger("corral.engine")

PERIOD = 1.0  # with no event, every handler still runs this often (expiry, joins, safety net)
REAPER = str(Fact.REAPER)  # as its history rows name it: its handler lock, and its name among those this one ran
REAP_PERIOD = 1.0  # the reaper judges by time (silent for the loss timeout): once a second is soon enough
# The job states any handler's targets can be in: what a pass reads the presence of before running them.
TARGET_JOB_STATES = frozenset(TASK_TARGET_JOB_STATES).union(*(h.job_states for h in JOB_HANDLERS))


@dataclass(frozen=True)
class Present:
    """A pass's read of what there is to do, and how many commits this store had made when it began."""

    states: set[tuple[str, bool, str, bool]]  # (job state, gang, task state, launched by a job): present_and_retries
    retries: bool  # whether RetryJobs has a target
    commits: int


class WorkerSignals:
    """One event per worker: set when it has new orders, waking its long-poll heartbeat (on this controller; other
    controllers sharing the store are told through `announce`)."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.announce: Callable[[Iterable[str]], None] | None = None

    def event(self, worker_id: str) -> asyncio.Event:
        return self._events[worker_id]

    def notify(self, worker_ids: Iterable[str]) -> None:
        worker_ids = list(worker_ids)
        self.wake(worker_ids)
        if self.announce is not None:
            self.announce(worker_ids)

    def wake(self, worker_ids: Iterable[str]) -> None:
        """Wake the long polls here of these workers (another controller gave them orders)."""
        for worker_id in worker_ids:
            self._events[worker_id].set()

    def wake_all(self) -> None:
        for event in self._events.values():
            event.set()


RECONNECT_SLACK = 5.0  # a live worker retries an unreachable controller every second at most; plus a slow start


def reconnect_grace(heartbeat_interval: float, loss_timeout: float) -> float:
    """How long after this controller starts before any worker may be declared lost.

    Loss is judged on each worker's recorded last heartbeat, so one that died before or during the
    outage is LOST as soon as this grace ends. A worker that is alive was only cut off by the outage:
    it calls again within a heartbeat interval or two once we listen, and its heartbeat then counts.
    Never longer than the loss timeout itself.
    """
    return min(loss_timeout, 2 * heartbeat_interval + RECONNECT_SLACK)


class Engine:
    def __init__(self, store: Store, signals: WorkerSignals, loss_timeout: float, heartbeat_interval: float,
                 lost_retention: float, estimator: Estimator | None = None) -> None:
        self.store = store
        self.signals = signals
        self.loss_timeout = loss_timeout
        self.lost_retention = lost_retention
        self._woken = asyncio.Event()
        self.passes = 0
        self.reap_after = time.time() + reconnect_grace(heartbeat_interval, loss_timeout)  # then every REAP_PERIOD
        self.retry_due: float | None = None  # the earliest scheduled job retry: the loop wakes for it
        self.target_errors = TargetErrors()  # streaks of errors about one job, across passes
        self._failing: set[str] = set()  # handlers whose last run failed as a whole: logged once per streak
        self.busy = False  # a handler of the last pass was held by another controller: look again soon
        self.handler_runs: dict[str, float] = {}  # when this controller last ran each handler (the registry's)
        self.last_pass_at: float | None = None
        self.estimator = estimator or Estimator()
        self.commits = 0  # this store's committed writes so far: whether a read of what is present is still current
        store.on_commit.append(self._committed)
        self._carried: Present | None = None  # a changed pass's last read, for the pass that follows it at once
        self.again = False  # the last pass changed what a handler run before it in the order may act on

    def _committed(self) -> None:
        self.commits += 1

    def wake(self) -> None:
        self._woken.set()

    async def run(self) -> None:
        """The handlers' passes, and beside them the start estimates: a simulation never holds up a pass."""
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self._estimating(), name="estimates")
            while True:
                changed = await self.run_pass()
                if changed and self.again:
                    continue  # one handler's successes are the next one's targets
                self._carried = None  # a pass that does not follow at once reads afresh
                await woken(self._woken, self._idle_timeout())

    async def _estimating(self) -> None:
        while True:
            await self._estimate()
            await asyncio.sleep(max(0.0, self.estimator.due - time.time()))

    def _idle_timeout(self) -> float:
        period = BUSY_RETRY if self.busy else PERIOD
        if self.retry_due is None:
            return period
        return min(period, max(0.0, self.retry_due - time.time()))

    async def _run_retries(self) -> bool:
        try:
            retries = await run_retries(self.store, time.time(), errors=self.target_errors)
        except HandlerBusy:
            self.busy = True
            return False
        except FENCED as error:
            note_fenced(RETRY_JOBS, error, log)
            self.busy = True  # what fenced it off is committed: the next pass reads it
            return False
        except Exception:
            self.retry_due = None  # wake on the period, not in a tight loop over a failing run
            self._failed("RetryJobs")
            return False
        self._failing.discard("RetryJobs")
        self.handler_runs[RETRY_JOBS] = time.time()
        self.retry_due = retries.next_due
        return retries.changed

    def _failed(self, handler: str) -> None:
        if handler not in self._failing:
            self._failing.add(handler)
            log.exception("handler %s failed; its transaction was rolled back (logged again only after it recovers)",
                          handler)

    async def _present(self) -> Present:
        """One read: which (job state, gang, task state) have rows, and whether RetryJobs has a target. A handler
        with no target in them is not run: it would take the writer for a read that finds nothing."""
        commits = self.commits  # before the read: a commit that ends during it makes the read stale
        async with self.store.read() as connection:
            return await self._read_present(connection, commits)

    async def _read_present(self, connection: AsyncConnection, commits: int) -> Present:
        now = time.time()
        states, wanted = await present_and_retries(connection, TARGET_JOB_STATES, now)
        if not wanted and self.retry_due is not None and self.retry_due <= now:
            self.retry_due = await next_due(connection)  # it went (cancelled): wake for the next one only
        return Present(states, wanted, commits)

    async def _present_once_committed(self, connection: AsyncConnection) -> Present:
        """`_present` read at the end of a handler run's write transaction that changed something: what there is
        once it commits (that commit counted), without a read transaction of its own after it. A commit here by
        another transaction meanwhile (none can come between on this store's one writer) makes it stale, as a
        read's."""
        return await self._read_present(connection, self.commits + 1)

    async def _first_read(self, woken: bool) -> Present:
        """What a pass starts from: the last read of the changed pass before it, where nothing was committed here
        since and nothing woke the engine (another controller's commit does); else a read of its own. A pass on the
        period, or one that follows a pass that changed nothing or asked for no pass after it
        (`again`: the loop drops its read), always reads afresh."""
        carried, self._carried = self._carried, None
        if carried is not None and not woken and carried.commits == self.commits:
            return carried
        return await self._present()

    async def run_pass(self) -> bool:
        """Every handler in order, each in its own transaction; only those that may have targets (read once, and
        again after a run that moved something, since one handler's successes are the next one's targets). A
        pass that finds nothing to do commits nothing. Says whether it changed anything; `again`, whether a pass
        should follow at once: not where its only change was a placing run's placements (`RunReport.only_placed`),
        which every handler after it in this pass saw, and which give another placing run nothing new."""
        woken = self._woken.is_set()
        self._woken.clear()
        self.busy = False
        self.again = False
        self.passes += 1
        self.last_pass_at = time.time()
        ENGINE_PASSES.inc()
        read = await self._first_read(woken)
        changed = False
        if read.retries:
            changed = await self._run_retries()  # first, so that the children it creates are placed in this pass
        else:
            self.target_errors.report(RETRY_JOBS, {})  # a run with no target ends every streak, as a run would
        if changed:
            self.again = True
            read = await self._present()
        for handler in JOB_HANDLERS:
            if self.retry_due is not None and time.time() >= self.retry_due and await self._run_retries():
                changed = self.again = True  # fell due during the pass: it does not wait for the pass
                read = await self._present()
            if not may_have_targets(handler, read.states):
                self.target_errors.report(handler.name, {})
                continue
            try:
                report = await run_handler(self.store, handler, time.time(), self.target_errors,
                                           then=self._present_once_committed)
            except HandlerBusy:
                self.busy = True
                continue
            except FENCED as error:
                note_fenced(handler.name, error, log)
                self.busy = True  # what fenced it off is committed: the next pass reads it
                continue
            except Exception:
                self._failed(handler.name)
                continue
            self._failing.discard(handler.name)
            self.handler_runs[handler.name] = time.time()
            if report.changed:
                changed = True
                self.again |= not report.only_placed
                self.signals.notify(report.workers)
                read = report.after
        if await self._reap():
            self.again = True
            return True
        if changed:
            self._carried = read  # read after the pass's last change: the next pass starts from it, if still current
        return changed

    async def _estimate(self) -> None:
        """Every pending job's start estimate, once per its period: it changes no state, so nothing waits on it."""
        try:
            ran = await self.estimator.run_if_due(self.store, time.time())
        except HandlerBusy:
            return  # another controller estimates this period
        except FENCED as error:
            note_fenced(ESTIMATOR, error, log)
            return
        except Exception:
            self._failed(ESTIMATOR)
            return
        self._failing.discard(ESTIMATOR)
        if ran:
            self.handler_runs[ESTIMATOR] = time.time()

    async def _reap(self) -> bool:
        """The reaper, once per REAP_PERIOD after the grace, taking the writer only when a worker is due for it."""
        now = time.time()
        if now < self.reap_after:
            return False
        self.reap_after = now + REAP_PERIOD
        try:
            async with self.store.read() as connection:
                if not await reaping_due(connection, now - self.loss_timeout, now - self.lost_retention):
                    return False
            async with self.store.write(REAPER) as connection:
                reaped = await reap_lost_workers(connection, time.time(), self.loss_timeout)
                await prune_lost_workers(connection, time.time() - self.lost_retention)
        except HandlerBusy:
            return False  # another controller reaps this period
        except FENCED as error:
            note_fenced(REAPER, error, log)
            return False
        except Exception:
            log.exception("reaper failed; its transaction was rolled back")
            return False
        self.handler_runs[REAPER] = time.time()
        if reaped.empty:
            return False
        self.signals.notify(reaped.touched_workers)
        return True
