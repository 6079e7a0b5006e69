"""The gang drain's decisions as pure functions: trigger, refund, completion rule, force order.

Includes a model of a gang driven only by these functions, and a property test that no
sequence of member failures leaves a gang stuck: from every state it reaches, either
re-placement or a terminal verdict is reachable, and the number of drains is bounded.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core.drain import (
    Budgets,
    Member,
    drain_timeout,
    drain_verdict,
    end_while_preempting,
    plan_drain,
    preemption_move,
    starts_drain,
)
from corral.core.lifecycle import SchedulingResult, Target, TaskView, judge
from corral.core.outcomes import Budget, after_attempt
from corral.core.states import JobState, TaskState
from corral.engine.handlers import CompleteDrain, ForceDrain, JobFacts, Snapshot
from corral.scheduling.placement import Request

J, T = JobState, TaskState
NOW = 1000.0


# --- 1. trigger ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("gang", "job_state", "was", "ended", "drains"), [
    (True, J.RUNNING, T.RUNNING, T.FAILED, True),
    (True, J.RUNNING, T.RUNNING, T.WORKER_FAILED, True),
    (True, J.PREPARING, T.BUILDING, T.FAILED, True),  # a build failure
    (True, J.SCHEDULED, T.ASSIGNED, T.WORKER_FAILED, True),
    (True, J.RUNNING, T.RUNNING, T.SUCCEEDED, False),  # ranks end at slightly different times
    (True, J.RUNNING, T.RUNNING, T.KILLED, False),  # a time limit ends the gang (DetectTermination)
    (True, J.RUNNING, T.PREEMPTING, T.WORKER_FAILED, False),  # a stopped sibling, not a new drain
    (True, J.DRAINING, T.RUNNING, T.FAILED, False),  # one drain per epoch
    (True, J.TERMINATING, T.RUNNING, T.FAILED, False),  # already ending
    (False, J.RUNNING, T.RUNNING, T.FAILED, False),  # independent tasks retry on their own
])
def test_what_starts_a_drain(gang, job_state, was, ended, drains):
    assert starts_drain(gang=gang, job_state=job_state, was=was, ended=ended) is drains


@pytest.mark.parametrize(("state", "to"), [
    (T.RUNNING, T.PREEMPTING), (T.STARTING, T.PREEMPTING), (T.PREPARED, T.PREEMPTING), (T.BUILDING, T.PREEMPTING),
    (T.ASSIGNED, T.PENDING), (T.PENDING, None), (T.SUCCEEDED, None), (T.FAILED, None), (T.TERMINATING, None),
    (T.PREEMPTING, None),
])
def test_what_a_preemption_does_to_each_state(state, to):
    assert preemption_move(state) is to


# --- 2. plan and refund --------------------------------------------------------------------------------

BUDGETS = Budgets(max_retries_failure=2, max_retries_preemption=100)


def test_a_plan_preempts_started_siblings_and_releases_assigned_ones():
    members = [Member(0, T.RUNNING), Member(1, T.ASSIGNED), Member(2, T.FAILED, failures=1),
               Member(3, T.SUCCEEDED), Member(4, T.PENDING)]
    plan = plan_drain(members, {2}, BUDGETS)
    assert (plan.trigger, plan.requeue, plan.preempt, plan.release) == (2, (2,), (0,), (1,))


def test_members_that_fail_at_once_make_one_drain_and_each_keeps_its_count():
    members = [Member(0, T.FAILED, failures=1), Member(1, T.WORKER_FAILED, preemptions=1), Member(2, T.RUNNING)]
    plan = plan_drain(members, {1, 0}, BUDGETS)
    assert (plan.trigger, plan.requeue, plan.preempt) == (0, (0, 1), (2,))


def test_a_trigger_with_no_budget_left_is_not_requeued():
    plan = plan_drain([Member(0, T.FAILED, failures=3), Member(1, T.RUNNING)], {0}, BUDGETS)
    assert (plan.requeue, plan.preempt) == ((), (1,))


def test_a_plan_needs_a_trigger():
    with pytest.raises(ValueError):
        plan_drain([Member(0, T.RUNNING)], set(), BUDGETS)


@pytest.mark.parametrize(("reported", "means"), [
    (T.FAILED, T.PREEMPTED), (T.KILLED, T.PREEMPTED), (T.SUCCEEDED, T.SUCCEEDED),
    (T.PREEMPTED, T.PREEMPTED), (T.WORKER_FAILED, T.WORKER_FAILED),
])
def test_an_exit_while_preempting(reported, means):
    assert end_while_preempting(reported) is means


def test_the_drain_timeout_is_the_grace_plus_thirty_seconds():
    assert drain_timeout(15.0) == 45.0 and drain_timeout(0) == 30.0


# --- 5. the completion rule ----------------------------------------------------------------------------


@pytest.mark.parametrize(("states", "requeue", "why"), [
    ((T.PREEMPTED, T.PREEMPTED, T.PENDING), True, "every task goes back to PENDING"),
    ((T.WORKER_FAILED, T.PREEMPTED), True, "every task goes back to PENDING"),
    ((T.SUCCEEDED, T.PREEMPTED, T.PENDING), False, "task 0 already ended SUCCEEDED"),
    ((T.PREEMPTED, T.FAILED), False, "task 1 already ended FAILED"),
    ((T.PREEMPTED, T.KILLED), False, "task 1 already ended KILLED"),
])
def test_completion_rule(states, requeue, why):
    verdict = drain_verdict([Member(i, s) for i, s in enumerate(states)], BUDGETS)
    assert verdict.requeue is requeue and why in verdict.reason


def test_completion_fails_a_gang_with_a_member_out_of_budget():
    members = [Member(0, T.PENDING, failures=1), Member(1, T.WORKER_FAILED, preemptions=101)]
    verdict = drain_verdict(members, BUDGETS)
    assert not verdict.requeue and "task 1 used up its preemption budget" in verdict.reason
    verdict = drain_verdict([Member(0, T.FAILED, failures=3), Member(1, T.PREEMPTED)], BUDGETS)
    assert verdict.reason == "task 0 used up its failure budget (3 failures, 2 retries allowed)"


def test_completion_waits_for_every_preempting_member():
    with pytest.raises(ValueError):
        drain_verdict([Member(0, T.PREEMPTING), Member(1, T.PENDING)], BUDGETS)


# --- 4 then 5: the handlers, force before completion in one pass --------------------------------------


def drained(*states: TaskState, since: float = NOW, failures=()) -> Target:
    tasks = tuple(TaskView(100 + i, i, s, "w", failures[i] if failures else 0) for i, s in enumerate(states))
    return Target(1, True, "DRAINING", since, 0, tasks, ForceDrain().timeout(FACTS))


FACTS = JobFacts(Request(1, 0, 0), 0, None, max_retries_failure=2, grace_period=2.0, preemption_epoch=3)


def test_force_drain_expires_a_drain_past_its_timeout_only():
    snapshot = Snapshot(NOW, {1: FACTS})
    for age, forced in ((31.0, False), (32.5, True)):
        target = drained(T.PREEMPTING, T.PENDING, since=NOW - age)
        decision = ForceDrain().execute([target], snapshot)
        outcomes = judge([target], decision.result, ForceDrain.transitions, now=NOW, max_tries=None)
        assert [o.result for o in outcomes] == ([SchedulingResult.EXPIRED] if forced else [])
    assert outcomes[0].transition.task is T.PREEMPTED
    assert outcomes[0].note == "not acknowledged within the drain timeout (32s): forced"


def test_complete_drain_waits_then_requeues_or_fails():
    snapshot = Snapshot(NOW, {1: FACTS})
    waiting = CompleteDrain().execute([drained(T.PREEMPTING, T.PENDING)], snapshot).result
    assert (waiting.successes, waiting.failures) == ([], [])
    back = CompleteDrain().execute([drained(T.PREEMPTED, T.PENDING, failures=(0, 1))], snapshot).result
    assert back.successes == [(1, None)]
    assert back.notes[(1, None)].startswith("drain of epoch 3 complete: every task goes back to PENDING")
    target = drained(T.PREEMPTED, T.FAILED, failures=(0, 3))
    failed = CompleteDrain().execute([target], snapshot).result
    (outcome,) = judge([target], failed, CompleteDrain.transitions, now=NOW, max_tries=CompleteDrain.max_tries)
    assert outcome.result is SchedulingResult.GIVE_UP and outcome.transition.job is J.FAILED


def test_a_forced_task_completes_its_drain_in_the_same_pass():
    """ForceDrain runs before CompleteDrain: what it forces, CompleteDrain sees at once."""
    snapshot = Snapshot(NOW, {1: FACTS})
    target = drained(T.PREEMPTING, T.PENDING, since=NOW - 60)
    forced = judge([target], ForceDrain().execute([target], snapshot).result, ForceDrain.transitions, now=NOW,
                   max_tries=None)
    after = replace(target, tasks=tuple(replace(t, state=forced[0].transition.task)
                                        if t.state is T.PREEMPTING else t for t in target.tasks))
    assert CompleteDrain().execute([after], snapshot).result.successes == [(1, None)]


# --- a gang driven by these functions alone ------------------------------------------------------------


@dataclass
class Gang:
    """A model gang: the edges and handlers of the controller, reduced to the pure decisions."""

    budgets: Budgets
    members: list[Member]
    job: JobState = J.RUNNING
    drains: int = 0
    log: list[str] = field(default_factory=list)

    @classmethod
    def running(cls, size: int, budgets: Budgets) -> Gang:
        return cls(budgets, [Member(i, T.RUNNING) for i in range(size)])

    def set(self, index: int, **changes) -> None:
        self.members[index] = replace(self.members[index], **changes)

    def end(self, index: int, ended: TaskState) -> None:
        """A member's process ends, or its worker is lost (the worker-report and reaper edges)."""
        member = self.members[index]
        if member.state not in (T.ASSIGNED, T.RUNNING, T.PREEMPTING):
            return
        if member.state is T.PREEMPTING:  # a stopped sibling: refunded, whatever the end
            self.set(index, state=end_while_preempting(ended))
            return
        drains = starts_drain(gang=True, job_state=self.job, was=member.state, ended=ended)
        decision = after_attempt(ended, Budget(self.budgets.max_retries_failure, self.budgets.max_retries_preemption,
                                               member.failures, member.preemptions),
                                 ever_ran=member.state is not T.ASSIGNED)
        self.set(index, state=ended, failures=decision.failures, preemptions=decision.preemptions)
        if ended is T.SUCCEEDED and all(m.state is T.SUCCEEDED for m in self.members):
            self.job = J.SUCCEEDED
        if not drains:
            return
        plan = plan_drain(self.members, {index}, self.budgets)
        self.job, self.drains = J.DRAINING, self.drains + 1
        for i in (*plan.requeue, *plan.release):
            self.set(i, state=T.PENDING)
        for i in plan.preempt:
            self.set(i, state=T.PREEMPTING)

    def acknowledge(self, index: int) -> None:
        if self.members[index].state is T.PREEMPTING:
            self.set(index, state=T.PREEMPTED)

    def force_and_complete(self) -> None:
        """One engine pass: ForceDrain (every PREEMPTING member, as if past its timeout), then CompleteDrain."""
        if self.job is not J.DRAINING:
            return
        for member in self.members:
            if member.state is T.PREEMPTING:
                self.set(member.index, state=T.PREEMPTED)
        verdict = drain_verdict(self.members, self.budgets)
        self.job = J.PENDING if verdict.requeue else J.FAILED
        for member in self.members:
            if verdict.requeue:
                self.set(member.index, state=T.PENDING)
            elif member.state is T.PENDING:
                self.set(member.index, state=T.KILLED)

    def place_and_start(self) -> None:
        if self.job is J.PENDING:
            self.job = J.RUNNING
            for member in self.members:
                self.set(member.index, state=T.RUNNING)


def test_task_a_failing_every_time_fails_the_gang_after_its_real_failures():
    """A fails every time; B and C are stopped each round and refunded.

    corral counts retries, not attempts: max_retries_failure=2 allows three real failures,
    the third ends it. It never loops forever.
    """
    gang = Gang.running(3, Budgets(max_retries_failure=2, max_retries_preemption=100))
    rounds = 0
    while gang.job is not J.FAILED:
        rounds += 1
        assert rounds <= 10, "the gang loops forever"
        gang.end(0, T.FAILED)  # A's real failure
        assert [m.state for m in gang.members[1:]] == [T.PREEMPTING, T.PREEMPTING]
        gang.acknowledge(1)
        gang.acknowledge(2)
        gang.force_and_complete()
        gang.place_and_start()
    assert rounds == 3 and gang.drains == 3
    assert [(m.failures, m.preemptions) for m in gang.members] == [(3, 0), (0, 0), (0, 0)]


@pytest.mark.parametrize("retries", [0, 1, 3])
def test_every_failure_budget_ends_after_its_real_failures(retries):
    gang = Gang.running(3, Budgets(max_retries_failure=retries, max_retries_preemption=100))
    for _ in range(retries + 1):
        assert gang.job is J.RUNNING
        gang.end(1, T.FAILED)
        gang.force_and_complete()
        gang.place_and_start()
    assert gang.job is J.FAILED and gang.members[1].failures == retries + 1


def test_a_member_that_succeeded_before_a_sibling_failed_stays_succeeded_and_the_gang_fails():
    gang = Gang.running(3, BUDGETS)
    gang.end(0, T.SUCCEEDED)
    gang.end(1, T.FAILED)
    gang.force_and_complete()
    assert gang.job is J.FAILED
    # Task 1 went back to PENDING with the drain (it had budget left); the verdict leaves it KILLED, unplaced.
    assert [m.state for m in gang.members] == [T.SUCCEEDED, T.KILLED, T.PREEMPTED]


EVENTS = st.lists(st.tuples(st.sampled_from(["fail", "lose", "succeed", "ack", "pass", "place"]),
                            st.integers(0, 2)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(events=EVENTS, max_failure=st.integers(0, 2), max_preemption=st.integers(0, 2))
def test_no_sequence_of_member_failures_leaves_a_gang_stuck(events, max_failure, max_preemption):
    budgets = Budgets(max_failure, max_preemption)
    gang = Gang.running(3, budgets)
    for kind, index in events:
        if gang.job in (J.FAILED, J.SUCCEEDED):
            break
        {"fail": lambda i: gang.end(i, T.FAILED), "lose": lambda i: gang.end(i, T.WORKER_FAILED),
         "succeed": lambda i: gang.end(i, T.SUCCEEDED), "ack": gang.acknowledge,
         "pass": lambda i: gang.force_and_complete(), "place": lambda i: gang.place_and_start()}[kind](index)
        assert_can_move_on(gang)
        # Only real failures are charged, so drains are bounded by the budgets.
        assert gang.drains <= 3 * (max_failure + max_preemption + 2)


def assert_can_move_on(gang: Gang) -> None:
    """From here, re-placement or a terminal verdict is reachable, by the engine alone."""
    probe = Gang(gang.budgets, list(gang.members), gang.job, gang.drains)
    states = {m.state for m in probe.members}
    if probe.job is J.RUNNING:
        # Placed and undecided: every member is still running or finished well, and a member's next end decides.
        assert states <= {T.RUNNING, T.SUCCEEDED}, probe
        return
    if probe.job is J.DRAINING:
        assert states <= {T.PREEMPTING, T.PREEMPTED, T.PENDING, T.WORKER_FAILED, T.FAILED, T.SUCCEEDED}, probe
        probe.force_and_complete()
    assert probe.job in (J.PENDING, J.FAILED, J.SUCCEEDED), probe
    if probe.job is J.PENDING:
        assert all(m.state is T.PENDING for m in probe.members), probe  # placeable as a unit
        assert all(probe.budgets.used_up(m) is None for m in probe.members), probe
