"""The router's scheduler as a pure state machine, driven against recording fake effects: no sockets, no sleeps."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.serving.policies import FitPolicy
from corral.serving.scheduler import Req, Scheduler, Served


@dataclass
class FakeEffects:
    """A pool with room for `slots` loaded deployments; records every effect."""

    served_: dict[str, Served]
    slots: int = 1
    loaded_: set[str] = field(default_factory=set)
    ready_: set[str] = field(default_factory=set)
    gone: set[int] = field(default_factory=set)  # clients that disconnected
    swaps: list[tuple[str, list[str]]] = field(default_factory=list)
    served_reqs: list[tuple[int, str]] = field(default_factory=list)
    errors: list[tuple[int, int, str]] = field(default_factory=list)
    positions: list[tuple[int, int]] = field(default_factory=list)
    unloads: list[tuple[list[str], str]] = field(default_factory=list)
    evictions: list[tuple[str, list[str]]] = field(default_factory=list)  # for a swap in flight: (target, names)

    def served(self, name):
        return self.served_.get(name)

    def ready(self, name):
        return name in self.ready_ and name in self.loaded_

    def loaded(self):
        return set(self.loaded_)

    def fits(self, target, evicting, loading):
        return len((self.loaded_ | loading) - evicting - {target}) < self.slots

    def start_swap(self, target, evict):
        self.swaps.append((target, list(evict)))

    def evict(self, names, target):
        self.evictions.append((target, list(names)))

    def grant_serve(self, req, deployment):
        if req.id in self.gone:
            return False
        self.served_reqs.append((req.id, deployment))
        return True

    def grant_error(self, req, status, reason):
        self.errors.append((req.id, status, reason))

    def position(self, req, position):
        self.positions.append((req.id, position))

    def unload(self, names, reason):
        self.unloads.append((list(names), reason))

    # what the router does when a swap finishes or an unload lands
    def finish_swap(self, scheduler, target, now, error=None):
        evict = next(e for t, e in reversed(self.swaps) if t == target)
        self.loaded_ -= set(evict)
        self.ready_ -= set(evict)
        if error is None:
            self.loaded_.add(target)
            self.ready_.add(target)
        scheduler.on_swap_done(target, error, now)


def setup(*names, slots=1, **served):
    effects = FakeEffects({n: served.get(n, Served(n)) for n in names}, slots=slots)
    return effects, Scheduler(effects, FitPolicy(), max_wait=30.0)


def test_a_ready_deployment_is_granted_at_once_and_counted_in_flight():
    effects, scheduler = setup("a")
    effects.loaded_ = effects.ready_ = {"a"}
    assert scheduler.on_request(Req(1, "a"), 0) == "granted"
    assert effects.served_reqs == [(1, "a")] and scheduler.in_flight == {"a": 1}


def test_unknown_deployment_is_404():
    effects, scheduler = setup("a")
    assert scheduler.on_request(Req(1, "nope"), 0) == "errored"
    assert effects.errors[0][:2] == (1, 404) and not effects.swaps


def test_a_cold_deployment_starts_a_swap_and_later_requests_join_it():
    effects, scheduler = setup("a")
    assert scheduler.on_request(Req(1, "a"), 0) == "started"
    assert scheduler.on_request(Req(2, "a"), 1) == "joined"
    assert effects.swaps == [("a", [])]  # one start, not two
    effects.finish_swap(scheduler, "a", 5)
    assert effects.served_reqs == [(1, "a"), (2, "a")] and scheduler.in_flight["a"] == 2


def test_a_failed_swap_errors_every_waiter_with_the_reason():
    effects, scheduler = setup("a")
    scheduler.on_request(Req(1, "a"), 0)
    scheduler.on_request(Req(2, "a"), 0)
    effects.finish_swap(scheduler, "a", 1, error="exited 1")
    assert [(i, s) for i, s, _ in effects.errors] == [(1, 503), (2, 503)]
    assert "exited 1" in effects.errors[0][2] and not scheduler.in_flight.get("a")


def test_only_idle_deployments_are_evicted_and_a_busy_one_is_waited_for():
    effects, scheduler = setup("a", "b")
    effects.loaded_ = effects.ready_ = {"a"}
    scheduler.on_request(Req(1, "a"), 0)  # a has one request in flight
    assert scheduler.on_request(Req(2, "b"), 1) == "queued"
    assert effects.swaps == [] and effects.positions == [(2, 1)]
    scheduler.on_serve_done("a", 2)  # a drains: now it may go
    assert effects.swaps == [("b", ["a"])]


def test_a_swap_in_flight_counts_as_running_for_the_policy():
    effects, scheduler = setup("a", "b", "c", slots=2)
    scheduler.on_request(Req(1, "a"), 0)
    scheduler.on_request(Req(2, "b"), 0)  # two slots: both start, nothing evicted
    assert effects.swaps == [("a", []), ("b", [])]
    assert scheduler.on_request(Req(3, "c"), 0) == "queued"  # a and b are loading: neither may be evicted
    effects.finish_swap(scheduler, "a", 1)
    effects.finish_swap(scheduler, "b", 1)
    scheduler.on_serve_done("a", 2)
    scheduler.on_serve_done("b", 2)
    assert effects.swaps[-1] == ("c", ["a"])  # a was used least recently


def test_a_swap_whose_target_still_finds_no_room_evicts_the_idle_deployment_holding_it():
    effects, scheduler = setup("a", "b")
    assert scheduler.on_request(Req(1, "a"), 0) == "started"
    assert effects.swaps == [("a", [])]
    effects.loaded_ = effects.ready_ = {"b"}  # b holds the room after all: the pool was read before it loaded
    scheduler.on_request(Req(2, "b"), 1)  # and it is busy: it stays
    scheduler.on_tick(2)
    assert effects.evictions == []
    scheduler.on_serve_done("b", 3)
    scheduler.on_tick(4)
    assert effects.evictions == [("a", ["b"])] and "b" in scheduler.unloading
    scheduler.on_tick(5)  # what is being unloaded counts as gone: b is not evicted twice
    assert effects.evictions == [("a", ["b"])]


def test_a_swap_whose_target_fits_evicts_nothing_more():
    effects, scheduler = setup("a", "b", slots=2)
    effects.loaded_ = effects.ready_ = {"b"}
    scheduler.on_request(Req(1, "a"), 0)
    scheduler.on_tick(1)
    assert effects.swaps == [("a", [])] and effects.evictions == []


def test_what_is_being_unloaded_counts_as_gone_for_a_new_swap():
    effects, scheduler = setup("a", "b", a=Served("a", idle_timeout=1))
    effects.loaded_ = effects.ready_ = {"a"}
    scheduler.on_tick(0)
    scheduler.on_tick(2)  # a goes idle: its room frees by itself, nothing more to evict
    assert scheduler.on_request(Req(1, "b"), 3) == "started" and effects.swaps == [("b", [])]


def test_a_grant_the_client_did_not_take_is_not_in_flight():
    effects, scheduler = setup("a")
    scheduler.on_request(Req(1, "a"), 0)
    effects.gone.add(1)
    effects.finish_swap(scheduler, "a", 1)
    assert scheduler.in_flight.get("a", 0) == 0  # no serve-done will ever come for it


def test_a_client_that_disconnects_while_queued_leaves_the_queue_at_once():
    effects, scheduler = setup("a", "b")
    effects.loaded_ = effects.ready_ = {"a"}
    scheduler.on_request(Req(1, "a"), 0)
    scheduler.on_request(Req(2, "b"), 0)
    scheduler.on_request(Req(3, "b"), 0)
    scheduler.on_cancel(2, 1)
    assert [r.id for r in scheduler.queue] == [3] and effects.positions[-1] == (3, 1)
    scheduler.on_serve_done("a", 2)
    effects.finish_swap(scheduler, "b", 3)
    assert effects.served_reqs == [(1, "a"), (3, "b")]


def test_a_client_that_disconnects_while_joined_is_dropped_from_the_swap():
    effects, scheduler = setup("a")
    scheduler.on_request(Req(1, "a"), 0)
    scheduler.on_request(Req(2, "a"), 0)
    scheduler.on_cancel(1, 0)
    effects.finish_swap(scheduler, "a", 1)
    assert effects.served_reqs == [(2, "a")]


def test_queue_is_priority_first_then_fifo():
    effects, scheduler = setup("a", "low", "high", high=Served("high", priority=5))
    effects.loaded_ = effects.ready_ = {"a"}
    scheduler.on_request(Req(1, "a"), 0)
    scheduler.on_request(Req(2, "low"), 1)
    scheduler.on_request(Req(3, "high"), 2)
    assert [r.id for r in scheduler.queue] == [3, 2]
    scheduler.on_serve_done("a", 3)
    assert effects.swaps == [("high", ["a"])]


def test_an_overdue_request_stops_new_grants_to_what_it_waits_on():
    effects, scheduler = setup("a", "b", b=Served("b", priority=-5))
    effects.loaded_ = effects.ready_ = {"a"}
    scheduler.on_request(Req(1, "a"), 0)
    scheduler.on_request(Req(2, "b"), 0)  # waits for a to drain, at low priority
    scheduler.on_tick(31)  # past max_wait: b's request is overdue
    assert scheduler.on_request(Req(3, "a"), 31) == "queued"  # a is draining for it
    scheduler.on_serve_done("a", 32)
    assert effects.swaps == [("b", ["a"])]


def test_once_the_overdue_request_leaves_nothing_is_held_back_any_more():
    effects, scheduler = setup("a", "b", b=Served("b", priority=-5))
    effects.loaded_ = effects.ready_ = {"a"}
    scheduler.on_request(Req(1, "a"), 0)
    scheduler.on_request(Req(2, "b"), 0)
    scheduler.on_tick(31)  # b's request is overdue: a is held back for it
    effects.gone.add(2)
    scheduler.on_cancel(2, 32)  # and its client leaves: the queue is empty
    assert not scheduler.waits("a")
    assert scheduler.on_request(Req(3, "a"), 33) == "granted"


def test_a_recently_loaded_deployment_is_not_evicted_before_its_minimum_residency():
    effects, scheduler = setup("a", "b", a=Served("a", min_residency=10))
    scheduler.on_request(Req(1, "a"), 0)
    effects.finish_swap(scheduler, "a", 1)
    scheduler.on_serve_done("a", 2)
    assert scheduler.on_request(Req(2, "b"), 3) == "queued"
    scheduler.on_tick(10)
    assert effects.swaps == [("a", [])]
    scheduler.on_tick(11)
    assert effects.swaps[-1] == ("b", ["a"])


def test_concurrency_limit_answers_429():
    effects, scheduler = setup("a", a=Served("a", concurrency=1))
    effects.loaded_ = effects.ready_ = {"a"}
    scheduler.on_request(Req(1, "a"), 0)
    assert scheduler.on_request(Req(2, "a"), 0) == "errored"
    assert effects.errors[-1][:2] == (2, 429)


def test_idle_past_timeout_unloads_counting_from_the_end_of_the_last_request():
    effects, scheduler = setup("a", a=Served("a", idle_timeout=10))
    effects.loaded_ = effects.ready_ = {"a"}
    scheduler.on_request(Req(1, "a"), 0)
    scheduler.on_tick(15)  # in flight: not idle however long it runs
    scheduler.on_serve_done("a", 20)
    scheduler.on_tick(29)
    assert effects.unloads == []
    scheduler.on_tick(30)
    assert effects.unloads == [(["a"], "idle timeout")]
    scheduler.on_tick(31)
    assert len(effects.unloads) == 1  # asked once


def test_idle_time_of_a_preloaded_deployment_counts_from_when_it_is_ready():
    effects, scheduler = setup("a", a=Served("a", idle_timeout=10))
    effects.loaded_ = {"a"}  # starting
    scheduler.on_tick(0)
    scheduler.on_tick(20)
    assert effects.unloads == []
    effects.ready_ = {"a"}
    scheduler.on_tick(21)
    scheduler.on_tick(30)
    assert effects.unloads == []
    scheduler.on_tick(31)
    assert effects.unloads == [(["a"], "idle timeout")]


def test_a_request_for_an_unloading_deployment_starts_it_again():
    effects, scheduler = setup("a", a=Served("a", idle_timeout=1))
    effects.loaded_ = effects.ready_ = {"a"}
    scheduler.on_tick(0)
    scheduler.on_tick(2)
    assert effects.unloads
    assert scheduler.on_request(Req(1, "a"), 3) == "started"


def test_unload_errors_waiting_requests_of_the_unloaded_deployment():
    effects, scheduler = setup("a", "b")
    effects.loaded_ = effects.ready_ = {"a"}
    scheduler.on_request(Req(1, "a"), 0)
    scheduler.on_request(Req(2, "b"), 0)  # queued behind a's in-flight request
    scheduler.on_unload(["b"], "undeployed", 1)
    assert effects.errors == [(2, 503, "b unloaded: undeployed")] and not scheduler.queue
    assert effects.unloads == [(["b"], "undeployed")]


def test_shutdown_errors_every_waiter_and_refuses_new_requests():
    effects, scheduler = setup("a", "b")
    effects.loaded_ = effects.ready_ = {"a"}
    scheduler.on_request(Req(1, "a"), 0)
    scheduler.on_request(Req(2, "b"), 0)
    scheduler.on_request(Req(3, "a"), 0)
    effects.ready_ = set()
    effects.loaded_ = set()
    scheduler.on_request(Req(4, "a"), 0)  # starts a swap
    scheduler.on_shutdown("router stopping")
    assert sorted(i for i, _, _ in effects.errors) == [2, 4]
    assert scheduler.on_request(Req(5, "a"), 1) == "errored"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["req", "done", "swap", "cancel", "tick"]),
                          st.sampled_from(["a", "b", "c"]), st.integers(0, 30)), max_size=60))
def test_every_request_is_answered_once_and_in_flight_never_goes_negative(events):
    """Whatever happens, each request ends granted or errored exactly once, or is still waiting."""
    effects, scheduler = setup("a", "b", "c", slots=2)
    now, next_id = 0.0, 0
    for kind, name, n in events:
        now += 1
        if kind == "req":
            next_id += 1
            scheduler.on_request(Req(next_id, name), now)
        elif kind == "done" and scheduler.in_flight.get(name):
            scheduler.on_serve_done(name, now)
        elif kind == "swap" and name in scheduler.swaps:
            effects.finish_swap(scheduler, name, now, error="boom" if n % 5 == 0 else None)
        elif kind == "cancel" and next_id:
            effects.gone.add(n % next_id + 1)
            scheduler.on_cancel(n % next_id + 1, now)
        elif kind == "tick":
            scheduler.on_tick(now)
        assert all(v >= 0 for v in scheduler.in_flight.values())
    answered = [i for i, _ in effects.served_reqs] + [i for i, _, _ in effects.errors]
    waiting = [r.id for r in scheduler.queue] + [r.id for w in scheduler.swaps.values() for r in w]
    assert len(answered) == len(set(answered))
    assert set(answered) | set(waiting) | effects.gone >= set(range(1, next_id + 1))
    assert not set(answered) & set(waiting)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["req", "done", "swap", "tick", "close"]),
                          st.sampled_from(["a", "b", "c", "unknown"]), st.integers(0, 30)), max_size=60))
def test_grant_at_once_grants_exactly_when_on_request_would_and_counts_the_same(events):
    """The fast path's answer and its in-flight count, against `on_request` on a copy, at every request."""
    effects, scheduler = setup("a", "b", "c", slots=2, c=Served("c", concurrency=2))
    now, next_id = 0.0, 0
    for kind, name, n in events:
        now += 1
        if kind == "req":
            next_id += 1
            before = copy.deepcopy(scheduler.in_flight)
            fast = copy.deepcopy(scheduler)
            granted = fast.grant_at_once(name)
            outcome = scheduler.on_request(Req(next_id, name), now)
            assert granted == (outcome == "granted")
            assert fast.in_flight == (scheduler.in_flight if granted else before)
        elif kind == "done" and scheduler.in_flight.get(name):
            scheduler.on_serve_done(name, now)
        elif kind == "swap" and name in scheduler.swaps:
            effects.finish_swap(scheduler, name, now, error="boom" if n % 5 == 0 else None)
        elif kind == "tick":
            scheduler.on_tick(now)
        elif kind == "close" and n == 0:
            scheduler.on_shutdown("stopping")


def test_waits_tells_ahead_whether_a_request_would_wait_or_be_decided_at_once():
    effects, scheduler = setup("a", "b", "c", c=Served("c", concurrency=1))
    effects.loaded_ = effects.ready_ = {"a", "c"}
    assert not scheduler.waits("a")  # ready: granted at once
    assert not scheduler.waits("nope")  # unknown: 404 at once
    assert scheduler.on_request(Req(1, "c"), 0) == "granted"
    assert not scheduler.waits("c")  # at its concurrency: 429 at once
    assert scheduler.waits("b")  # not loaded: it would queue and start it
    assert scheduler.on_request(Req(2, "b"), 0) in ("started", "queued")
    assert scheduler.waits("b")  # its start is in flight: it would join it
    scheduler.on_shutdown("stopping")
    assert not scheduler.waits("b")  # shutting down: 503 at once
