"""What controllers sharing a store tell each other (store.notify's payloads) and the registry's takeovers."""

from __future__ import annotations

from corral.controller.registry import GONE_AFTER, takeovers
from corral.store.cluster_state import ControllerRow
from corral.store.notify import MAX_WORKERS, Change, decode, encode

NOW = 1000.0


def row(controller_id: str, seen_at: float, **handlers: float) -> ControllerRow:
    return ControllerRow(controller_id, f"http://{controller_id}", 1, "host", "0.1.0", 0.0, seen_at, handlers, None)


def test_a_change_survives_its_payload_and_a_long_list_of_workers_becomes_every_worker():
    change = Change("a", state=True, workers=frozenset({"w1", "w2"}), settings=False, dialing=frozenset({"w2"}))
    assert decode(encode(change)) == change
    assert decode('{"from": "a", "state": true, "workers": [], "settings": false}').dialing == frozenset()
    many = Change("a", workers=frozenset(f"w{i}" for i in range(MAX_WORKERS + 1)))
    assert decode(encode(many)).workers is None
    assert len(encode(many)) < 8000  # PostgreSQL's limit on a payload


def test_a_payload_that_is_not_ours_is_ignored():
    for payload in ("", "[]", "{}", '{"from": "a"}', '{"from": "a", "state": true, "workers": 3, "settings": 0}'):
        assert decode(payload) is None


def test_a_handler_last_run_by_a_controller_now_gone_is_taken_over_once():
    gone = row("b", NOW - GONE_AFTER - 1, ScheduleJobs=NOW - 20, StartTasks=NOW - 20)
    live = row("c", NOW, StartTasks=NOW - 1)
    own = row("a", NOW - 1, ScheduleJobs=NOW - 30)
    ran = {"ScheduleJobs": NOW - 0.5, "StartTasks": NOW - 0.5, "RetryJobs": NOW - 0.5}
    # StartTasks' last runner is c, alive: not a failover; RetryJobs had no runner before.
    assert takeovers("a", ran, [own, gone, live], NOW) == ["ScheduleJobs"]
    # Once this controller's row says it ran it, the gone one is no longer its previous runner.
    refreshed = row("a", NOW, **ran)
    assert takeovers("a", {**ran, "ScheduleJobs": NOW + 1}, [refreshed, gone, live], NOW + 1) == []
    # Not run since the row was written: nothing taken.
    assert takeovers("a", {"ScheduleJobs": NOW - 30}, [own, gone], NOW) == []
