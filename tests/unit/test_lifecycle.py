"""The lifecycle engine's judgement (DESIGN.md, "The lifecycle engine"), as pure code."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.core.lifecycle import (
    DERIVED,
    HandlerResult,
    MatchType,
    Outcome,
    SchedulingResult,
    StatusTransitions,
    Target,
    TaskView,
    TransitionStatus,
    judge,
    matches,
)
from corral.core.states import TASK_TERMINAL, JobState, TaskState

J, T, R = JobState, TaskState, SchedulingResult

SUCCESS = TransitionStatus(job=J.SCHEDULED, task=T.ASSIGNED)
NEED_RETRY = TransitionStatus(job=J.PENDING)
EXPIRED = TransitionStatus(job=J.UNSCHEDULABLE, task=T.UNSCHEDULABLE)
GIVE_UP = TransitionStatus(job=J.FAILED, task=T.KILLED)
TRANSITIONS = StatusTransitions(success=SUCCESS, need_retry=NEED_RETRY, expired=EXPIRED, give_up=GIVE_UP)
NOW = 1000.0


def job(job_id: int, *, tries: int = 0, since: float = NOW - 10, timeout: float | None = None,
        states: tuple[TaskState, ...] = (T.PENDING,)) -> Target:
    tasks = tuple(TaskView(id=job_id * 10 + i, index=i, state=s) for i, s in enumerate(states))
    return Target(job_id, True, "PENDING", since, tries, tasks, timeout)


def task(job_id: int, task_id: int, *, tries: int = 0, since: float = NOW - 10,
         timeout: float | None = None) -> Target:
    return Target(job_id, False, "PENDING", since, tries, (TaskView(task_id, 0, T.PENDING),), timeout)


def run(targets, result, *, max_tries=3, transitions=TRANSITIONS, **kw) -> dict:
    outcomes = judge(targets, result, transitions, now=NOW, max_tries=max_tries, **kw)
    by_key = {o.target.key: o for o in outcomes}
    assert len(by_key) == len(outcomes), "a target judged twice"
    return by_key


# --- Target keys ---------------------------------------------------------------------------------


def test_target_keys():
    assert job(7).key == (7, None)
    assert task(7, 71).key == (7, 71)


def test_transition_status_defaults_to_no_change():
    assert TransitionStatus() == TransitionStatus(job=None, task=None)
    assert StatusTransitions() == StatusTransitions(None, None, None, None)


def test_judged_outcomes_are_those_the_constructor_makes():
    """`judge` makes its outcomes by position (one per target a pass): each is the outcome the constructor makes, its
    fields in slots of its own."""
    targets = [task(1, 11), task(2, 21, tries=3), task(3, 31, since=NOW - 100, timeout=30.0), job(4)]
    result = HandlerResult(successes=[(1, 11)], failures=[(2, 21)], skipped=[(4, None)],
                           notes={(4, None): "waiting for room"})
    outcomes = judge(targets, result, TRANSITIONS, now=NOW, max_tries=3)
    assert outcomes == [Outcome(targets[0], R.SUCCESS, SUCCESS, 0), Outcome(targets[1], R.GIVE_UP, GIVE_UP, 4),
                        Outcome(targets[2], R.EXPIRED, EXPIRED, 0),
                        Outcome(targets[3], R.SKIPPED, None, 0, "waiting for room")]
    assert all(type(outcome) is Outcome and not hasattr(outcome, "__dict__") for outcome in outcomes)


# --- StatusTransitions.for_result ----------------------------------------------------------------


@pytest.mark.parametrize(("result", "expected"), [
    (R.SUCCESS, SUCCESS), (R.NEED_RETRY, NEED_RETRY), (R.EXPIRED, EXPIRED), (R.GIVE_UP, GIVE_UP), (R.SKIPPED, None),
])
def test_for_result(result, expected):
    assert TRANSITIONS.for_result(result) is expected


def test_for_result_covers_every_result():
    assert {r.value for r in SchedulingResult} == {"SUCCESS", "NEED_RETRY", "EXPIRED", "GIVE_UP", "SKIPPED"}
    for r in SchedulingResult:
        StatusTransitions().for_result(r)  # no KeyError


def test_for_result_of_empty_transitions_is_none():
    assert all(StatusTransitions().for_result(r) is None for r in SchedulingResult)


# --- judge: successes ------------------------------------------------------------------------------


def test_success_gets_success_transition_and_resets_tries():
    a, b = job(1, tries=2), task(2, 21, tries=5)
    out = run([a, b], HandlerResult(successes=[a.key, b.key]))
    assert set(out) == {(1, None), (2, 21)}
    for key in out:
        assert out[key].result is R.SUCCESS
        assert out[key].transition is SUCCESS
        assert out[key].tries == 0
    assert out[(2, 21)].target is b


def test_success_wins_over_expiry():
    a = job(1, since=0.0, timeout=5.0)
    out = run([a], HandlerResult(successes=[a.key]))
    assert out[a.key].result is R.SUCCESS


# --- judge: failures -------------------------------------------------------------------------------


@pytest.mark.parametrize(("tries", "max_tries", "expected"), [
    (0, 3, R.NEED_RETRY),
    (1, 3, R.NEED_RETRY),
    (2, 3, R.NEED_RETRY),  # tries+1 == max_tries: still a retry
    (3, 3, R.GIVE_UP),  # tries+1 passes the limit
    (10, 3, R.GIVE_UP),
    (0, 0, R.GIVE_UP),
    (0, 1, R.NEED_RETRY),
    (1, 1, R.GIVE_UP),
])
def test_failure_counts_tries(tries, max_tries, expected):
    a = job(1, tries=tries)
    out = run([a], HandlerResult(failures=[a.key]), max_tries=max_tries)
    assert out[a.key].result is expected
    assert out[a.key].tries == tries + 1
    assert out[a.key].transition is (NEED_RETRY if expected is R.NEED_RETRY else GIVE_UP)


@pytest.mark.parametrize("tries", [0, 1, 100, 10**6])
def test_failure_retries_forever_without_a_limit(tries):
    a = task(1, 11, tries=tries)
    out = run([a], HandlerResult(failures=[a.key]), max_tries=None)
    assert out[a.key].result is R.NEED_RETRY
    assert out[a.key].transition is NEED_RETRY
    assert out[a.key].tries == tries + 1


def test_repeated_failures_reach_give_up_after_max_tries():
    tries, results = 0, []
    for _ in range(5):
        a = job(1, tries=tries)
        outcome = run([a], HandlerResult(failures=[a.key]), max_tries=3)[a.key]
        results.append(outcome.result)
        tries = outcome.tries
    assert results == [R.NEED_RETRY, R.NEED_RETRY, R.NEED_RETRY, R.GIVE_UP, R.GIVE_UP]


def test_failed_target_past_its_timeout_is_a_failure_not_expired():
    a = job(1, since=0.0, timeout=5.0, tries=0)
    b = job(2, since=0.0, timeout=5.0, tries=3)
    out = run([a, b], HandlerResult(failures=[a.key, b.key]), max_tries=3)
    assert out[a.key].result is R.NEED_RETRY and out[a.key].transition is NEED_RETRY
    assert out[b.key].result is R.GIVE_UP and out[b.key].transition is GIVE_UP


# --- judge: expiry ---------------------------------------------------------------------------------


def test_untouched_target_past_timeout_expires():
    a = job(1, since=NOW - 61, timeout=60.0, tries=2)
    out = run([a], HandlerResult())
    assert out[a.key].result is R.EXPIRED
    assert out[a.key].transition is EXPIRED
    assert out[a.key].tries == 2  # expiry does not count a try


@pytest.mark.parametrize(("since", "timeout"), [
    (NOW - 59, 60.0),
    (NOW - 60, 60.0),  # exactly at the timeout: not past it
    (NOW, 0.5),
    (0.0, None),  # no timeout: never expires
])
def test_untouched_target_within_timeout_gets_no_outcome(since, timeout):
    a = job(1, since=since, timeout=timeout)
    assert run([a], HandlerResult()) == {}


def test_custom_expiry_check_replaces_timeout():
    a, b = job(1, timeout=None), job(2, since=0.0, timeout=1.0)
    seen = []

    def is_expired(target: Target, now: float) -> bool:
        seen.append((target.key, now))
        return target.job_id == 1

    out = run([a, b], HandlerResult(), is_expired=is_expired)
    assert set(out) == {a.key}
    assert out[a.key].result is R.EXPIRED
    assert sorted(seen) == [((1, None), NOW), ((2, None), NOW)]


# --- judge: skipped --------------------------------------------------------------------------------


def test_skipped_target_only_gets_history():
    a = job(1, tries=4)
    out = run([a], HandlerResult(skipped=[a.key]))
    assert out[a.key].result is R.SKIPPED
    assert out[a.key].transition is None
    assert out[a.key].tries == 4


def test_skipped_target_past_timeout_expires():
    a = job(1, since=0.0, timeout=30.0)
    out = run([a], HandlerResult(skipped=[a.key], notes={a.key: "no room"}))
    assert out[a.key].result is R.EXPIRED
    assert out[a.key].transition is EXPIRED
    assert out[a.key].note == "no room"


def test_notes_are_carried_to_every_kind_of_outcome():
    s, f, k, e = job(1), job(2), job(3), job(4, since=0.0, timeout=1.0)
    notes = {s.key: "placed on w1", f.key: "boom", k.key: "waiting for room", e.key: "too long"}
    out = run([s, f, k, e], HandlerResult(successes=[s.key], failures=[f.key], skipped=[k.key], notes=notes))
    assert {key: o.note for key, o in out.items()} == notes
    assert [o.result for o in out.values()] == [R.SUCCESS, R.NEED_RETRY, R.SKIPPED, R.EXPIRED]


def test_missing_note_is_none():
    a = job(1)
    assert run([a], HandlerResult(successes=[a.key]))[a.key].note is None


def test_outcome_order_is_success_failure_then_targets():
    a, b, c, d = job(1), job(2), job(3, since=0.0, timeout=1.0), job(4)
    outcomes = judge([a, b, c, d], HandlerResult(successes=[b.key], failures=[a.key], skipped=[d.key]),
                     TRANSITIONS, now=NOW, max_tries=None)
    assert [(o.target.job_id, o.result) for o in outcomes] == [
        (2, R.SUCCESS), (1, R.NEED_RETRY), (3, R.EXPIRED), (4, R.SKIPPED),
    ]
    assert all(isinstance(o, Outcome) for o in outcomes)


def test_empty_transitions_mean_history_only():
    a, b = job(1), job(2, since=0.0, timeout=1.0)
    out = run([a, b], HandlerResult(successes=[a.key]), transitions=StatusTransitions())
    assert out[a.key].transition is None and out[a.key].result is R.SUCCESS
    assert out[b.key].transition is None and out[b.key].result is R.EXPIRED


def test_derived_job_transition_is_passed_through():
    derived = StatusTransitions(success=TransitionStatus(job=DERIVED))
    a = job(1)
    assert run([a], HandlerResult(successes=[a.key]), transitions=derived)[a.key].transition.job is DERIVED


def test_whole_job_and_its_task_targets_are_distinct():
    whole, one = job(5, states=(T.PENDING, T.PENDING)), task(5, 50)
    out = run([whole, one], HandlerResult(successes=[one.key], skipped=[whole.key]))
    assert out[(5, 50)].result is R.SUCCESS
    assert out[(5, None)].result is R.SKIPPED


# --- matches ---------------------------------------------------------------------------------------

CHECK = frozenset({T.PENDING, T.ASSIGNED})


@pytest.mark.parametrize(("states", "all_", "any_", "not_any"), [
    ([], True, False, True),
    ([T.PENDING], True, True, False),
    ([T.PENDING, T.ASSIGNED], True, True, False),
    ([T.PENDING, T.RUNNING], False, True, False),
    ([T.RUNNING], False, False, True),
    ([T.RUNNING, T.SUCCEEDED], False, False, True),
])
def test_matches(states, all_, any_, not_any):
    assert matches(states, CHECK, MatchType.ALL) is all_
    assert matches(states, CHECK, MatchType.ANY) is any_
    assert matches(states, CHECK, MatchType.NOT_ANY) is not_any


def test_matches_accepts_a_generator():
    assert matches((s for s in [T.RUNNING, T.FAILED]), TASK_TERMINAL, MatchType.ANY) is True
    assert matches((s for s in [T.RUNNING, T.FAILED]), TASK_TERMINAL, MatchType.ALL) is False


def test_matches_with_empty_check():
    assert matches([T.RUNNING], frozenset(), MatchType.ALL) is False
    assert matches([T.RUNNING], frozenset(), MatchType.ANY) is False
    assert matches([T.RUNNING], frozenset(), MatchType.NOT_ANY) is True


# --- property: each target judged at most once; each acted-on target exactly once ------------------

FATE = st.sampled_from(["success", "failure", "none"])


@given(
    fates=st.lists(st.tuples(FATE, st.booleans(), st.booleans(), st.integers(0, 5),
                             st.one_of(st.none(), st.floats(0, 100)), st.floats(0, 200)), max_size=12),
    max_tries=st.one_of(st.none(), st.integers(0, 4)),
)
def test_each_target_judged_at_most_once(fates, max_tries):
    targets, result = [], HandlerResult()
    for i, (fate, skip, whole, tries, timeout, age) in enumerate(fates):
        target = job(i, tries=tries, since=NOW - age, timeout=timeout) if whole else \
            task(i, 1000 + i, tries=tries, since=NOW - age, timeout=timeout)
        targets.append(target)
        if fate == "success":
            result.successes.append(target.key)
        elif fate == "failure":
            result.failures.append(target.key)
        if skip:  # a handler may also list an acted-on target as skipped; acting wins
            result.skipped.append(target.key)
    outcomes = judge(targets, result, TRANSITIONS, now=NOW, max_tries=max_tries)
    keys = [o.target.key for o in outcomes]
    assert len(keys) == len(set(keys))
    acted = set(result.successes) | set(result.failures)
    assert acted <= set(keys)
    for o in outcomes:
        target = o.target
        if target.key in result.successes:
            assert (o.result, o.tries) == (R.SUCCESS, 0)
        elif target.key in result.failures:
            assert o.tries == target.tries + 1
            over = max_tries is not None and target.tries + 1 > max_tries
            assert o.result is (R.GIVE_UP if over else R.NEED_RETRY)
        elif target.timeout is not None and NOW - target.since > target.timeout:
            assert o.result is R.EXPIRED
        else:
            assert o.result is R.SKIPPED and target.key in result.skipped
        assert o.transition is TRANSITIONS.for_result(o.result)
    # Untouched, unexpired, unskipped targets get nothing.
    for target in targets:
        expired = target.timeout is not None and NOW - target.since > target.timeout
        if target.key not in acted and target.key not in result.skipped and not expired:
            assert target.key not in keys
