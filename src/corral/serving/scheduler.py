"""The router's scheduler: a pure state machine over requests, swaps and in-flight counts.

It runs only on the router's one event loop, so it needs no locks, and it touches the world
only through `Effects`: it reads what is loaded and ready, starts swaps, grants or refuses
requests, reports queue positions and unloads. Time comes in with each event. Every request
ends in exactly one of: granted, joined (to a swap in flight), queued, started (a swap), or
errored with a reason; none is dropped. Its tests drive the `on_*` methods against a recording
fake: no sockets, no sleeps.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Served:
    """What the scheduler knows of a deployment: its name and the spec fields that rule its requests."""

    name: str
    priority: int = 0
    concurrency: int | None = None  # requests in flight before 429
    idle_timeout: float | None = None  # scale to zero after this long idle
    min_residency: float = 0.0  # not evicted sooner than this after it loaded


@dataclass(eq=False)
class Req:
    """One client request waiting for a decision; `id` is the router's handle on its waiting client."""

    id: int
    deployment: str
    priority: int = 0
    at: float = 0.0  # when it arrived
    seq: int = 0


class Policy(Protocol):
    """An eviction policy: pure; which of `running` (least recently used first) must stop for `target` to run.

    `fits(evicting)` says whether the target would fit the pool once `evicting` are gone;
    None means no eviction makes room now.
    """

    def evict_for(self, target: str, running: Sequence[str],
                  fits: Callable[[frozenset[str]], bool]) -> list[str] | None:
        ...


class Effects(Protocol):
    """The scheduler's whole window on the world, implemented by the router."""

    def served(self, name: str) -> Served | None: ...
    def ready(self, name: str) -> bool: ...  # has a healthy replica to send a request to
    def loaded(self) -> set[str]: ...  # deployments that want replicas now
    def fits(self, target: str, evicting: frozenset[str], loading: frozenset[str]) -> bool: ...
    def start_swap(self, target: str, evict: list[str]) -> None: ...  # async; ends with on_swap_done
    def evict(self, names: list[str], target: str) -> None: ...  # async scale to zero, for a swap in flight
    def grant_serve(self, req: Req, deployment: str) -> bool: ...  # False: the client is gone
    def grant_error(self, req: Req, status: int, reason: str) -> None: ...
    def position(self, req: Req, position: int) -> None: ...
    def unload(self, names: list[str], reason: str) -> None: ...  # async scale to zero


@dataclass
class Scheduler:
    effects: Effects
    policy: Policy
    max_wait: float = 60.0  # a request queued longer goes ahead of every other (no starvation)
    queue: list[Req] = field(default_factory=list)
    swaps: dict[str, list[Req]] = field(default_factory=dict)  # target -> the requests waiting on it
    in_flight: dict[str, int] = field(default_factory=dict)
    last_done: dict[str, float] = field(default_factory=dict)  # when its last request ended (idle since)
    loaded_at: dict[str, float] = field(default_factory=dict)
    unloading: set[str] = field(default_factory=set)
    draining: set[str] = field(default_factory=set)  # an overdue request waits for these to empty
    closed: str | None = None
    _positions: dict[int, int] = field(default_factory=dict)
    _seq: itertools.count = field(default_factory=itertools.count)

    # events --------------------------------------------------------------------------------

    def on_request(self, req: Req, now: float) -> str:
        """Decide a new request, in this order; returns which way it went (for tests and metrics).

        1. the router is shutting down: error 503;
        2. the deployment is unknown: error 404;
        3. it has `concurrency` requests in flight already: error 429;
        4. it is ready and no overdue request waits for it to drain: grant;
        5. a swap to load it is in flight: join it;
        6. otherwise queue it and re-examine the queue, which may start a swap for it.
        """
        served = self.effects.served(req.deployment)
        refusal = self._refusal(req.deployment, served)
        if refusal is not None:  # 1 to 3
            self.effects.grant_error(req, *refusal)
            return "errored"
        req.priority, req.at, req.seq = served.priority, now, next(self._seq)
        if self._at_once(req.deployment):  # 4
            return "granted" if self._grant(req, now) else "gone"
        if req.deployment in self.swaps:  # 5
            self.swaps[req.deployment].append(req)
            return "joined"
        self.queue.append(req)  # 6
        self._drain(now)
        return "started" if any(req in waiters for waiters in self.swaps.values()) else \
            "granted" if req not in self.queue else "queued"

    def grant_at_once(self, deployment: str) -> bool:
        """Grant a new request on the spot when `on_request` would (cases 1 to 4 pass): it is counted in flight.

        False means it must go through `on_request`. The common request asks nothing else, so it
        needs no `Req`, no waiter and no future: what a fast path can skip on every request."""
        served = self.effects.served(deployment)
        if self.closed is not None or served is None or not self._at_once(deployment):
            return False
        flying = self.in_flight.get(deployment, 0)
        if served.concurrency is not None and flying >= served.concurrency:
            return False
        self.in_flight[deployment] = flying + 1
        return True

    def waits(self, deployment: str) -> bool:
        """Whether a request for `deployment` now would wait (queued, or joining a start), not be decided at once."""
        return self._refusal(deployment, self.effects.served(deployment)) is None and not self._at_once(deployment)

    def _refusal(self, deployment: str, served: Served | None) -> tuple[int, str] | None:
        if self.closed is not None:
            return 503, self.closed
        if served is None:
            return 404, f"no deployment serves {deployment!r}"
        if served.concurrency is not None and self.in_flight.get(deployment, 0) >= served.concurrency:
            return 429, f"{deployment} has {served.concurrency} requests in flight"
        return None

    def _at_once(self, deployment: str) -> bool:
        """Ready, and no overdue request waits for it to drain."""
        return self._servable(deployment) and deployment not in self.draining

    def on_swap_done(self, target: str, error: str | None, now: float) -> None:
        """Hand the result to every request that waited on the swap, then re-examine the queue."""
        waiters = self.swaps.pop(target, [])
        self._positions.update((w.id, 0) for w in waiters)
        if error is not None:
            for req in waiters:
                self.effects.grant_error(req, 503, f"{target} could not start: {error}")
        else:
            self.loaded_at[target] = now
            self.last_done[target] = now
            for req in waiters:
                self._grant(req, now)
        self._drain(now)

    def on_serve_done(self, deployment: str, now: float) -> None:
        """A granted request ended: idle time counts from now; an empty deployment may now be evicted."""
        left = self.in_flight.get(deployment, 0) - 1
        self.in_flight[deployment] = max(left, 0)
        self.last_done[deployment] = now
        if left <= 0:
            self._drain(now)

    def on_cancel(self, req_id: int, now: float) -> None:
        """The client of a waiting request went away: it leaves the queue (or its swap's waiters) at once."""
        self.queue = [r for r in self.queue if r.id != req_id]
        for waiters in self.swaps.values():
            waiters[:] = [r for r in waiters if r.id != req_id]
        self._positions.pop(req_id, None)
        self._drain(now)

    def on_unload(self, names: list[str], reason: str, now: float) -> None:
        """Scale deployments to zero by order (a user, an undeploy): their waiting requests end with 503."""
        for req in [r for r in self.queue if r.deployment in names]:
            self.queue.remove(req)
            self.effects.grant_error(req, 503, f"{req.deployment} unloaded: {reason}")
        for name in names:
            for req in self.swaps.pop(name, []):
                self.effects.grant_error(req, 503, f"{name} unloaded: {reason}")
        self.unloading.update(names)
        self.effects.unload(list(names), reason)
        self._drain(now)

    def on_tick(self, now: float) -> None:
        """Time passed: unload deployments idle past their timeout, and re-examine the queue (ageing, residency).

        Idle time counts from the end of the last request, or from when it was first seen ready.
        """
        loaded = self.effects.loaded()
        self.unloading &= loaded
        idle = []
        for name in sorted(loaded - self.unloading - set(self.swaps)):
            if not self.effects.ready(name):
                continue  # still starting: idle time counts once it can serve
            served = self.effects.served(name)
            since = self.last_done.setdefault(name, now)
            if (served is not None and served.idle_timeout is not None and not self.in_flight.get(name)
                    and not any(r.deployment == name for r in self.queue) and now - since >= served.idle_timeout):
                idle.append(name)
        if idle:
            self.unloading.update(idle)
            self.effects.unload(idle, "idle timeout")
        self._make_room(now)
        self._drain(now)

    def on_shutdown(self, reason: str) -> None:
        """Every waiting request ends with 503; nothing new is accepted. Stopping replicas is not ours."""
        self.closed = reason
        for req in self.queue:
            self.effects.grant_error(req, 503, reason)
        for waiters in self.swaps.values():
            for req in waiters:
                self.effects.grant_error(req, 503, reason)
        self.queue.clear()
        self.swaps.clear()

    # the queue -----------------------------------------------------------------------------

    def _drain(self, now: float) -> None:
        """Serve, join or start a swap for each queued request that can move, most urgent first.

        A swap may evict only deployments with nothing in flight, loaded for at least their
        minimum residency, and not loading themselves; otherwise the request stays queued and
        the next serve-done or tick looks again. The policy sees the running set including the
        swaps in flight.
        """
        if not self.queue:  # the common case, after every request's end: nothing waits, nothing is held back
            self.draining.clear()
            return
        self.queue.sort(key=lambda r: (not self._overdue(r, now), -r.priority, r.seq))
        self.draining = set()
        for req in list(self.queue):
            name = req.deployment
            if name in self.draining:
                continue  # loaded, held back until an overdue request's eviction of it goes through
            if self._servable(name):
                self.queue.remove(req)
                self._grant(req, now)
                continue
            if name in self.swaps:
                self.queue.remove(req)
                self.swaps[name].append(req)
                continue
            evict = self._eviction(name, now)
            if evict is None:
                continue
            blocked = [e for e in evict if self._busy(e, now)]
            if blocked:
                if self._overdue(req, now):
                    self.draining.update(blocked)
                continue
            self.queue.remove(req)
            self.swaps[name] = [req]
            self.unloading.discard(name)
            self.unloading.update(evict)
            for gone in evict:
                self.loaded_at.pop(gone, None)
            self.effects.start_swap(name, evict)
        for position, req in enumerate(self.queue, start=1):
            if self._positions.get(req.id) != position:
                self._positions[req.id] = position
                self.effects.position(req, position)

    def _eviction(self, target: str, now: float) -> list[str] | None:
        """What the policy would evict for `target`, counting the room of what is being unloaded as free."""
        running = [r for r in self._running(now) if r != target]
        unloading = frozenset(self.unloading)
        chosen = self.policy.evict_for(
            target, running, lambda evicting: self.effects.fits(target, evicting | unloading, frozenset(self.swaps)))
        return None if chosen is None else [e for e in chosen if e != target]

    def _make_room(self, now: float) -> None:
        """A swap whose target still finds no room evicts again: the pool it was decided on may have been behind,
        or a deployment loaded since took the room. Only what the policy picks and is idle goes."""
        for target in list(self.swaps):
            unloading = frozenset(self.unloading)
            if self.effects.ready(target) or self.effects.fits(target, unloading, frozenset(self.swaps)):
                continue
            evict = self._eviction(target, now)
            if not evict or any(self._busy(e, now) for e in evict):
                continue
            self.unloading.update(evict)
            for gone in evict:
                self.loaded_at.pop(gone, None)
            self.effects.evict(evict, target)

    def _running(self, now: float) -> list[str]:
        """Loaded deployments and swap targets, least recently used first."""
        running = (self.effects.loaded() - self.unloading) | set(self.swaps)
        return sorted(running, key=lambda n: (n in self.swaps, self.last_done.get(n, now), n))

    def _busy(self, name: str, now: float) -> bool:
        """Not evictable now: requests in flight, loading, or loaded more recently than its minimum residency."""
        if self.in_flight.get(name, 0) > 0 or name in self.swaps:
            return True
        served = self.effects.served(name)
        loaded_at = self.loaded_at.get(name)
        return served is not None and loaded_at is not None and now - loaded_at < served.min_residency

    def _servable(self, name: str) -> bool:
        return name not in self.swaps and name not in self.unloading and self.effects.ready(name)

    def _overdue(self, req: Req, now: float) -> bool:
        return now - req.at > self.max_wait

    def _grant(self, req: Req, now: float) -> bool:
        """In flight only if the client took it: a client already gone never sends a serve-done."""
        self._positions.pop(req.id, None)
        if not self.effects.grant_serve(req, req.deployment):
            return False
        self.in_flight[req.deployment] = self.in_flight.get(req.deployment, 0) + 1
        return True
