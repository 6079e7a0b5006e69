"""A worker's orders, derived from stored state on every heartbeat reply.

Because they are derived, not queued, an order lost with a reply or a controller restart is
simply given again; the worker acts on each (task, attempt, action) once.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from corral.core.protocol import BuildOrder, Order, PreemptOrder, RelayOrder, StartOrder, StopOrder
from corral.core.roles import ADMIN
from corral.core.states import JobState, TaskState
from corral.scheduling.rooms import SHARES, gpu_share
from corral.store.attachments import fresh_openings
from corral.store.off_loop import converted
from corral.store.orders import gang_masters, job_specs, ordered_tasks

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from corral.store.store import Store

T = TaskState
GANG_BUILDS_IN = frozenset({JobState.PREPARING, JobState.PREPARED, JobState.STARTING, JobState.RUNNING})
MASTER_PORT_BASE = 20000


QUIET_READ_EVERY = 10.0  # seconds: a quiet worker's orders are still read this often


@dataclass(eq=False)
class Poll:
    """One long poll of a worker. `since`: when its orders were last read and found none, where this poll skips the
    read; `quiet`: answered with none."""

    since: float | None
    quiet: bool = False

    @property
    def skips_read(self) -> bool:
        return self.since is not None


class QuietPolls:
    """The workers whose latest heartbeat was answered with no orders: the next long poll of one whose signal was not
    rung since needs no read of its orders, which would be none. A worker's orders change only by a commit that rings
    its signal (WorkerSignals.notify, here or from another controller) or by its own reports, which are answered with
    the orders they make. A heartbeat that began after another one of the same worker leaves that one's answer no
    say. The orders are still read every QUIET_READ_EVERY seconds: a change that rang no one (none is known) would
    reach its worker that late, never not at all."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._latest: dict[str, Poll] = {}
        self._clock = clock

    def begin(self, worker_id: str, rung: bool) -> Poll:
        """A heartbeat's poll (`rung`: its worker's signal is set, read before the heartbeat clears it)."""
        latest = self._latest.get(worker_id)
        since = latest.since if latest is not None and latest.quiet and not rung else None
        if since is not None and self._clock() - since >= QUIET_READ_EVERY:
            since = None
        poll = self._latest[worker_id] = Poll(since)
        return poll

    def answered(self, worker_id: str, poll: Poll, orders: list[Order]) -> None:
        if not orders and self._latest.get(worker_id) is poll:
            poll.quiet = True
            if poll.since is None:
                poll.since = self._clock()


def master_port(job_id: int, attempt: int) -> int:
    """A rendezvous port that differs between jobs and attempts on the same master host."""
    return MASTER_PORT_BASE + (job_id * 131 + attempt) % 20000


async def orders_of(connection: AsyncConnection, worker_ids: Collection[str],
                    job_token: Callable[[int], str] | None = None,
                    holding: Mapping[str, Collection[tuple[int, int]]] | None = None) -> dict[str, list[Order]]:
    """Each worker's orders for its tasks: starts, stops and preemptions in task order, then builds, but none for
    an attempt its worker says it holds (`holding`: worker -> (task id, attempt)): it took that build already."""
    rows = await ordered_tasks(connection, worker_ids)
    holding = holding or {}
    builds = [r for r in rows if r.state == T.ASSIGNED and (not r.gang or r.job_state in GANG_BUILDS_IN)
              and (r.id, r.attempt) not in holding.get(r.worker_id, ())]
    masters = await gang_masters(connection, {r.job_id for r in builds if r.gang})
    # A batch of heartbeats' builds is hundreds of validated models: off the event loop, which answers the polls.
    return await converted(len(rows), _orders, worker_ids, rows, builds, masters, job_token)


def _orders(worker_ids: Collection[str], rows: list, builds: list, masters: dict[int, str],
            job_token: Callable[[int], str] | None) -> dict[str, list[Order]]:
    orders: dict[str, list[Order]] = {worker_id: [] for worker_id in worker_ids}
    specs = job_specs([*builds, *(row for row in rows if row.state in (T.TERMINATING, T.PREEMPTING))])
    for row in rows:
        if row.state == T.STARTING:
            orders[row.worker_id].append(StartOrder(task_id=row.id, attempt=row.attempt))
        elif row.state == T.TERMINATING:
            orders[row.worker_id].append(StopOrder(task_id=row.id, attempt=row.attempt,
                                                   grace_period=specs[row.job_id].get("grace_period", 15.0),
                                                   reason="cancelled" if row.cancelled else "job is ending"))
        elif row.state == T.PREEMPTING:
            orders[row.worker_id].append(PreemptOrder(task_id=row.id, attempt=row.attempt, epoch=row.preempt_epoch,
                                                      grace_period=specs[row.job_id].get("grace_period", 15.0)))
    for row in builds:
        spec = specs[row.job_id]
        share = gpu_share(row.gpu) / SHARES or None
        orders[row.worker_id].append(BuildOrder(
            task_id=row.id, attempt=row.attempt, job_id=row.job_id, task_index=row.index,
            command=spec["command"], env=task_env(row, spec, masters.get(row.job_id), job_token),
            bundle=spec.get("bundle"), workdir=spec.get("workdir"), pip=spec.get("pip") or [],
            python=spec.get("python"), gpu_ids=row.gpu_ids or [], gpu_share=share,
            gpu_memory=(spec.get("resources") or {}).get("gpu_memory") if share else None,
            time_limit=spec.get("time_limit"),
            grace_period=spec.get("grace_period", 15.0), checkpoint=row.checkpoint_epoch is not None,
            allocate_port=spec.get("allocate_port", False), start=not row.gang,
            interactive=spec.get("interactive", False), idle_timeout=spec.get("idle_timeout"),
            run_as=row.unix_user if row.owner != ADMIN else None,
        ))
    return orders


async def relay_orders(connection: AsyncConnection, worker_id: str, relays_after: float | None) -> list[Order]:
    """The channels into the worker's tasks opened since `relays_after` (before then they are no longer waited for:
    corral.controller.relays); None when none waits for this worker, which spares every heartbeat a read of them."""
    if relays_after is None:
        return []
    return [RelayOrder(session=row.session, task_id=row.task_id, attempt=row.attempt, kind=row.kind, **row.detail)
            for row in await fresh_openings(connection, worker_id, relays_after)]


@dataclass(frozen=True)
class _Read:
    """One heartbeat's wait for its worker's orders: since when channels are waited for, what it holds, the answer."""

    relays_after: float | None
    holding: frozenset[tuple[int, int]]
    answer: asyncio.Future[list[Order]]

    def holds(self, order: Order) -> bool:
        return isinstance(order, BuildOrder) and (order.task_id, order.attempt) in self.holding


class OrderReads:
    """Reads of workers' orders that come while one is being read, read together in the next: one connection and
    one set of statements for them all. A read holds a pooled connection for its statements' round trips through
    the event loop; report heartbeats answered together would each take one at once (at 600 workers a read waited
    0.7 s for a connection). A read asked for after a commit is made after it: it joins only a read not yet begun.
    A worker whose orders cannot be read fails alone."""

    def __init__(self, store: Store, job_token: Callable[[int], str] | None = None) -> None:
        self.store, self.job_token = store, job_token
        self._waiting: dict[str, list[_Read]] = defaultdict(list)
        self._reader: asyncio.Task | None = None

    async def read(self, worker_id: str, relays_after: float | None,
                   holding: frozenset[tuple[int, int]] = frozenset()) -> list[Order]:
        """The worker's orders (orders_of) but the builds of what it holds, and the channels waiting for it
        (relay_orders)."""
        read = asyncio.get_running_loop().create_future()
        self._waiting[worker_id].append(_Read(relays_after, holding, read))
        if self._reader is None or self._reader.done():
            self._reader = asyncio.create_task(self._read())
        return await read

    async def _read(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, defaultdict(list)
            try:
                answers = await self._answers(batch)
            except Exception:  # whose orders cannot be read is found by reading each worker's alone
                answers = []
                for worker_id, reads in batch.items():
                    try:
                        answers += await self._answers({worker_id: reads})
                    except Exception as error:
                        answers += [(read.answer, error) for read in reads]
            for read, answer in answers:
                if read.done():  # its request may have gone meanwhile
                    continue
                if isinstance(answer, Exception):
                    read.set_exception(answer)
                else:
                    read.set_result(answer)

    async def _answers(self, batch: Mapping[str, list[_Read]]) -> list:
        """Each read of the batch with its worker's orders, read through one connection. A build is made once for
        all of a worker's reads, unless every one of them holds its attempt; each read is then given those it lacks."""
        holding = {worker_id: frozenset.intersection(*(read.holding for read in reads))
                   for worker_id, reads in batch.items()}
        async with self.store.read() as connection:
            orders = await orders_of(connection, list(batch), self.job_token, holding)
            return [(read.answer, [order for order in orders[worker_id] if not read.holds(order)]
                     + await relay_orders(connection, worker_id, read.relays_after))
                    for worker_id, reads in batch.items() for read in reads]


def task_env(row, spec: dict, master_addr: str | None,
             job_token: Callable[[int], str] | None = None) -> dict[str, str]:
    """The variables exported from the submitter's environment, under the job's own (env), then corral's, then
    the rendezvous variables of a gang.

    `CORRAL_TOKEN` is the job's own token (see job_tokens), so code in a task can reach its job.
    """
    env = {**(spec.get("export") or {}), **(spec.get("env") or {})}
    env.update(
        CORRAL_JOB_ID=str(row.job_id), CORRAL_TASK_INDEX=str(row.index),
        CORRAL_NUM_TASKS=str(row.replicas), CORRAL_ATTEMPT=str(row.attempt),
    )
    if job_token is not None:
        env["CORRAL_TOKEN"] = job_token(row.job_id)
    if row.gang:
        env.update(
            MASTER_ADDR=master_addr or "127.0.0.1", MASTER_PORT=str(master_port(row.job_id, row.attempt)),
            WORLD_SIZE=str(row.replicas), RANK=str(row.index),
        )
    return env

