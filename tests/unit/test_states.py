"""The task transition table and the named state sets against DESIGN.md (Task states, Job states)."""

from __future__ import annotations

import itertools

import pytest

from corral.core.states import (
    CONTROLLER,
    JOB_ACTIVE,
    JOB_TERMINAL,
    TASK_ACTIVE,
    TASK_BEFORE_PREPARED,
    TASK_BEFORE_RUNNING,
    TASK_FAILURE_OUTCOMES,
    TASK_HOLDS_RESOURCES,
    TASK_ON_WORKER,
    TASK_PREEMPTION_OUTCOMES,
    TASK_TERMINAL,
    TASK_TRANSITIONS,
    WORKER,
    IllegalTransition,
    JobState,
    TaskState,
    check_task_transition,
    is_legal,
)

T, J = TaskState, JobState

# DESIGN.md, "Task states" table, in its order.
DESIGN_TASK_STATES = [
    "PENDING", "ASSIGNED", "BUILDING", "PREPARED", "STARTING", "RUNNING", "PREEMPTING", "TERMINATING",
    "SUCCEEDED", "FAILED", "KILLED", "WORKER_FAILED", "PREEMPTED", "UNSCHEDULABLE",
]
# DESIGN.md, "Job states", in its order.
DESIGN_JOB_STATES = [
    "PENDING", "SCHEDULED", "PREPARING", "PREPARED", "STARTING", "RUNNING", "DRAINING", "TERMINATING",
    "SUCCEEDED", "FAILED", "CANCELLED", "UNSCHEDULABLE", "LOST",
]
DESIGN_JOB_TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "UNSCHEDULABLE", "LOST"}

ROWS = list(TASK_TRANSITIONS)
NON_ROWS = [pair for pair in itertools.product(TaskState, TaskState) if pair not in TASK_TRANSITIONS]


def _id(pair: tuple[TaskState, TaskState]) -> str:
    return f"{pair[0]}->{pair[1]}"


# --- the enums list exactly DESIGN.md's states ---------------------------------------------------


def test_task_states_are_exactly_designs_in_order():
    assert [s.value for s in TaskState] == DESIGN_TASK_STATES
    assert all(s.name == s.value for s in TaskState)


def test_job_states_are_exactly_designs_in_order():
    assert [s.value for s in JobState] == DESIGN_JOB_STATES
    assert all(s.name == s.value for s in JobState)


# --- every row is legal, every other pair is not --------------------------------------------------


def test_table_size():
    assert len(TaskState) ** 2 == len(ROWS) + len(NON_ROWS)
    assert len(ROWS) == 38  # 37 + PREEMPTING -> SUCCEEDED (a gang drain keeps work that finished)


@pytest.mark.parametrize("pair", ROWS, ids=_id)
def test_every_row_is_accepted(pair):
    current, new = pair
    assert check_task_transition(current, new) is None
    assert is_legal(current, new) is True
    who, why = TASK_TRANSITIONS[pair]
    assert who in (CONTROLLER, WORKER)
    assert why.strip()


@pytest.mark.parametrize("pair", NON_ROWS, ids=_id)
def test_every_other_pair_is_refused(pair):
    current, new = pair
    with pytest.raises(IllegalTransition) as caught:
        check_task_transition(current, new)
    assert str(current) in str(caught.value) and str(new) in str(caught.value)
    assert is_legal(current, new) is False


def test_illegal_transition_is_a_value_error():
    assert issubclass(IllegalTransition, ValueError)


def test_no_self_transitions():
    assert all(a != b for a, b in ROWS)


@pytest.mark.parametrize("pair", [(T.PENDING, T.RUNNING), (T.SUCCEEDED, T.PENDING), (T.KILLED, T.PENDING),
                                  (T.UNSCHEDULABLE, T.PENDING), (T.RUNNING, T.PENDING), (T.PREEMPTED, T.RUNNING)],
                         ids=_id)
def test_notable_moves_are_illegal(pair):
    with pytest.raises(IllegalTransition):
        check_task_transition(*pair)


# --- terminal states lead only back to PENDING, and only from the retryable ends --------------------


def test_terminal_states_only_lead_back_to_pending():
    from_terminal = {(a, b) for a, b in ROWS if a in TASK_TERMINAL}
    assert from_terminal == {(T.FAILED, T.PENDING), (T.WORKER_FAILED, T.PENDING), (T.PREEMPTED, T.PENDING)}
    assert all(TASK_TRANSITIONS[row][0] == CONTROLLER for row in from_terminal)


@pytest.mark.parametrize("state", [T.SUCCEEDED, T.KILLED, T.UNSCHEDULABLE])
def test_final_ends_have_no_way_out(state):
    assert [b for a, b in ROWS if a is state] == []


def test_every_state_is_reachable_from_pending():
    seen, frontier = {T.PENDING}, [T.PENDING]
    while frontier:
        current = frontier.pop()
        for a, b in ROWS:
            if a is current and b not in seen:
                seen.add(b)
                frontier.append(b)
    assert seen == set(TaskState)


def test_every_active_state_has_a_way_out_and_worker_loss():
    for state in TASK_ACTIVE:
        assert any(a is state for a, _ in ROWS), state
    # The reaper can fail every task that has a worker.
    for state in TASK_HOLDS_RESOURCES:
        assert (state, T.WORKER_FAILED) in TASK_TRANSITIONS, state
    assert (T.PENDING, T.WORKER_FAILED) not in TASK_TRANSITIONS


def test_who_sets_what_follows_design():
    # The worker reports exits; the controller orders stops and retries.
    for end in (T.SUCCEEDED, T.FAILED):
        assert all(TASK_TRANSITIONS[(a, b)][0] == WORKER for a, b in ROWS if b is end)
    assert all(TASK_TRANSITIONS[(a, b)][0] == CONTROLLER for a, b in ROWS if b is T.WORKER_FAILED)
    assert all(TASK_TRANSITIONS[(a, b)][0] == CONTROLLER for a, b in ROWS if b in (T.TERMINATING, T.PREEMPTING))
    assert TASK_TRANSITIONS[(T.PENDING, T.ASSIGNED)][0] == CONTROLLER
    assert TASK_TRANSITIONS[(T.PREEMPTING, T.PREEMPTED)][0] == WORKER


# --- the named sets ------------------------------------------------------------------------------


def test_terminal_and_active_partition_task_states():
    assert set(TaskState) == TASK_TERMINAL | TASK_ACTIVE
    assert set() == TASK_TERMINAL & TASK_ACTIVE
    assert {T.SUCCEEDED, T.FAILED, T.KILLED, T.WORKER_FAILED, T.PREEMPTED, T.UNSCHEDULABLE} == TASK_TERMINAL


def test_resource_holders_are_active_but_not_pending():
    assert TASK_HOLDS_RESOURCES < TASK_ACTIVE
    assert {T.PENDING} == TASK_ACTIVE - TASK_HOLDS_RESOURCES


def test_on_worker_states():
    assert TASK_ON_WORKER < TASK_HOLDS_RESOURCES
    assert {T.ASSIGNED} == TASK_HOLDS_RESOURCES - TASK_ON_WORKER


def test_before_sets_are_prefixes_of_the_lifecycle():
    order = DESIGN_TASK_STATES
    assert set(map(TaskState, order[: order.index("RUNNING")])) == TASK_BEFORE_RUNNING
    assert set(map(TaskState, order[: order.index("PREPARED")])) == TASK_BEFORE_PREPARED
    assert TASK_BEFORE_PREPARED < TASK_BEFORE_RUNNING < TASK_ACTIVE


def test_budget_outcome_sets():
    assert {T.WORKER_FAILED, T.PREEMPTED} == TASK_PREEMPTION_OUTCOMES
    assert {T.FAILED} == TASK_FAILURE_OUTCOMES
    assert set() == TASK_PREEMPTION_OUTCOMES & TASK_FAILURE_OUTCOMES
    # Exactly the ends that may go back to PENDING.
    retryable = {a for a, b in ROWS if a in TASK_TERMINAL and b is T.PENDING}
    assert retryable == TASK_PREEMPTION_OUTCOMES | TASK_FAILURE_OUTCOMES


def test_job_terminal_matches_design():
    assert {s.value for s in JOB_TERMINAL} == DESIGN_JOB_TERMINAL
    assert set(JobState) == JOB_TERMINAL | JOB_ACTIVE
    assert set() == JOB_TERMINAL & JOB_ACTIVE
    assert J.DRAINING in JOB_ACTIVE and J.TERMINATING in JOB_ACTIVE


def test_sets_are_frozen():
    for named in (TASK_TERMINAL, TASK_ACTIVE, TASK_HOLDS_RESOURCES, TASK_ON_WORKER, TASK_BEFORE_RUNNING,
                  TASK_BEFORE_PREPARED, TASK_PREEMPTION_OUTCOMES, TASK_FAILURE_OUTCOMES, JOB_TERMINAL, JOB_ACTIVE):
        assert isinstance(named, frozenset)
