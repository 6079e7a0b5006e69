"""Properties of the four transition tables (task, job, deployment, replica), and of who may make each move.

These do not compare a table with a copy of itself: they check what must hold of any table corral could run
on (every state reachable and able to end, ends absorbing, every setter a real handler or declared fact that
declares the move), so a row added or removed by mistake fails here.
"""

from __future__ import annotations

from collections import deque

import pytest

from corral.core.lifecycle import DERIVED
from corral.core.retries import NAME as RETRY_JOBS
from corral.core.retries import RETRY_TRANSITIONS, RetryState
from corral.core.serving import DEPLOYMENT_TRANSITIONS, REPLICA_TRANSITIONS, DeploymentState, ReplicaState
from corral.core.states import (
    FACTS,
    JOB_TERMINAL,
    JOB_TRANSITIONS,
    TASK_TERMINAL,
    TASK_TRANSITIONS,
    Fact,
    IllegalTransition,
    JobState,
    TaskState,
    Transitions,
)
from corral.engine.handlers import JOB_HANDLERS
from corral.engine.serving_handlers import SERVING_HANDLERS

T, J, D, R = TaskState, JobState, DeploymentState, ReplicaState

# table, the state every entity starts in, its ends, the states of its enum
TABLES = {
    "task": (TASK_TRANSITIONS, T.PENDING, TASK_TERMINAL, set(TaskState)),
    "job": (JOB_TRANSITIONS, J.PENDING, JOB_TERMINAL, set(JobState)),
    "deployment": (DEPLOYMENT_TRANSITIONS, D.PENDING, {D.DESTROYED}, set(DeploymentState)),
    "replica": (REPLICA_TRANSITIONS, R.PROVISIONING, {R.TERMINATED}, set(ReplicaState)),
    "retry chain": (RETRY_TRANSITIONS, RetryState.ARMED,
                    {RetryState.DONE, RetryState.NOT_RETRIED, RetryState.EXHAUSTED, RetryState.RETRIED},
                    set(RetryState)),
}
HANDLERS = {handler.name: handler for handler in (*JOB_HANDLERS, *SERVING_HANDLERS)}
# A task's end is not final while it has retry budget: these rows take it back to the queue as a new attempt.
RETRY_SETTERS = {Fact.RETRY, Fact.DRAIN, "CompleteDrain"}


def _reachable(table: Transitions, start: str) -> set[str]:
    seen, queue = {str(start)}, deque([str(start)])
    while queue:
        state = queue.popleft()
        for move in table.moves:
            if str(move.source) == state and str(move.target) not in seen:
                seen.add(str(move.target))
                queue.append(str(move.target))
    return seen


@pytest.mark.parametrize("entity", TABLES)
def test_every_state_is_reachable_from_the_start(entity):
    table, start, _, states = TABLES[entity]
    assert _reachable(table, start) == {str(s) for s in states}


@pytest.mark.parametrize("entity", TABLES)
def test_every_reachable_state_can_reach_an_end(entity):
    table, start, ends, _ = TABLES[entity]
    for state in _reachable(table, start):
        assert _reachable(table, state) & {str(e) for e in ends}, f"a {entity} in {state} can never end"


@pytest.mark.parametrize("entity", ["job", "deployment", "replica", "retry chain"])
def test_ends_are_absorbing(entity):
    table, _, ends, _ = TABLES[entity]
    leaving = [move for move in table.moves if move.source in ends]
    assert not leaving, leaving


def test_a_task_leaves_an_end_only_for_a_new_attempt():
    for move in TASK_TRANSITIONS.moves:
        if move.source in TASK_TERMINAL:
            assert move.target is T.PENDING and move.by in RETRY_SETTERS, move
    for final in (T.SUCCEEDED, T.KILLED, T.UNSCHEDULABLE):
        assert not [m for m in TASK_TRANSITIONS.moves if m.source is final], final


@pytest.mark.parametrize("entity", TABLES)
def test_no_row_stays_in_place(entity):
    assert all(move.source != move.target for move in TABLES[entity][0].moves)


@pytest.mark.parametrize("entity", TABLES)
def test_every_setter_is_a_handler_or_a_declared_fact(entity):
    for by in TABLES[entity][0].setters():
        assert by in HANDLERS or by in FACTS or by == RETRY_JOBS, f"{entity} rows name {by!r}, which is neither"


def _declared_targets(handler, entity: str) -> set[str]:
    """The states a handler's declared transitions move `entity` to (DERIVED: any end)."""
    found = set()
    for status in (handler.transitions.success, handler.transitions.need_retry, handler.transitions.expired,
                   handler.transitions.give_up):
        target = status and getattr(status, entity)
        if target is DERIVED:
            found |= {str(s) for s in JOB_TERMINAL}
        elif target is not None:
            found.add(str(target))
    return found | {str(state) for state in getattr(handler, "effect_moves", {}).get(entity, ())}


@pytest.mark.parametrize("entity", TABLES)
def test_every_row_of_a_handler_is_one_it_declares(entity):
    """A handler's row must be a move its declared transitions (or effects) make, from a state it acts on."""
    for move in TABLES[entity][0].moves:
        handler = HANDLERS.get(move.by)
        if handler is None:
            continue
        assert str(move.target) in _declared_targets(handler, entity), move
        acts_on = {str(s) for s in (*getattr(handler, "job_states", ()), *getattr(handler, "states", ()))}
        if entity in ("job", "deployment") or entity == "replica" and handler.entity == "replica":
            assert str(move.source) in acts_on, move


@pytest.mark.parametrize("handler", JOB_HANDLERS, ids=lambda h: h.name)
def test_every_job_move_a_handler_declares_is_a_row_naming_it(handler):
    for state in handler.job_states:
        for target in _declared_targets(handler, "job") - {str(state)}:
            if handler.transitions.success and handler.transitions.success.job is DERIVED:
                continue  # read from the tasks: one of the ends, whichever they decide
            assert JOB_TRANSITIONS.allows(state, target, handler.name), (handler.name, state, target)
    for target in _declared_targets(handler, "task"):
        assert any(m.target == target and m.by == handler.name for m in TASK_TRANSITIONS.moves), (handler.name,
                                                                                                  target)


def test_a_worker_can_report_only_what_a_worker_sees():
    """Placement, stops, preemptions, losses and retries are the controller's: no worker report reaches them."""
    reported = {move.target for move in TASK_TRANSITIONS.moves if move.by == Fact.WORKER}
    assert reported == {T.BUILDING, T.PREPARED, T.RUNNING, T.SUCCEEDED, T.FAILED, T.KILLED, T.PREEMPTED}
    for source, target in ((T.RUNNING, T.PREEMPTING), (T.FAILED, T.PENDING), (T.PREPARED, T.STARTING),
                           (T.RUNNING, T.WORKER_FAILED), (T.PENDING, T.ASSIGNED)):
        assert not TASK_TRANSITIONS.allows(source, target, Fact.WORKER)


def test_check_names_who_may_make_a_move():
    with pytest.raises(IllegalTransition, match="only by StartJobs, not by Worker"):
        TASK_TRANSITIONS.check(T.PREPARED, T.STARTING, Fact.WORKER)
    with pytest.raises(IllegalTransition, match="cannot go from SUCCEEDED to RUNNING"):
        TASK_TRANSITIONS.check(T.SUCCEEDED, T.RUNNING, Fact.WORKER)
    assert TASK_TRANSITIONS.check(T.RUNNING, T.SUCCEEDED, Fact.WORKER).why == "exit code 0"


def test_a_row_declared_twice_is_refused():
    from corral.core.states import moves
    with pytest.raises(ValueError, match="declared twice"):
        Transitions("task", [*moves(T.PENDING, T.ASSIGNED, "A", "x"), *moves(T.PENDING, T.ASSIGNED, "A", "y")])
