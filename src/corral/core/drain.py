"""Preemption and the gang drain (DESIGN.md, "Gang drain"), as pure decisions.

A gang's tasks talk to each other, so one dead member makes the rest useless. The drain, in
the order a person would explain it:

1. Trigger (`starts_drain`): a member of a placed gang ends FAILED or loses its worker on
   its own (not while it was being preempted). However many members end at once, one drain
   starts: one epoch.
2. Plan (`plan_drain`): members that ended on their own go back to PENDING if their budget
   allows, keeping their count; started siblings are told to preempt (`preemption_move`),
   ASSIGNED ones go straight back to PENDING; terminal ones are left alone.
3. Ends while preempting (`end_while_preempting`): whatever stops a preempted attempt (an
   acknowledgement, an exit before the order arrived, a lost worker) costs the stopped sibling
   nothing: its attempt is refunded, so only real failures use up the budget.
4. Force: a task still PREEMPTING after `drain_timeout` is forced to PREEMPTED.
5. Verdict (`drain_verdict`): once no member is PREEMPTING, the gang goes back to PENDING as a
   unit, or ends FAILED.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from corral.core.states import GANG_PLACED, STARTED, JobState, TaskState

J, T = JobState, TaskState

# The ends of a member that start a drain.
DRAIN_TRIGGERS = frozenset({T.FAILED, T.WORKER_FAILED})
# Ends after which a gang cannot restart whole: finished work is never overwritten.
GANG_FINAL_ENDS = frozenset({T.SUCCEEDED, T.FAILED, T.KILLED, T.UNSCHEDULABLE})
# Seconds a preempted task is given beyond its grace period to acknowledge before it is forced.
DRAIN_SLACK = 30.0


@dataclass(frozen=True)
class Member:
    """A gang member as the drain sees it: its state and the budget it has used."""

    index: int
    state: TaskState
    failures: int = 0
    preemptions: int = 0


@dataclass(frozen=True)
class Budgets:
    max_retries_failure: int
    max_retries_preemption: int

    def used_up(self, member: Member) -> str | None:
        """Why the member has no retry left, or None while it has."""
        if member.failures > self.max_retries_failure:
            return f"task {member.index} used up its failure budget ({member.failures} failures, " \
                   f"{self.max_retries_failure} retries allowed)"
        if member.preemptions > self.max_retries_preemption:
            return f"task {member.index} used up its preemption budget ({member.preemptions} preemptions, " \
                   f"{self.max_retries_preemption} retries allowed)"
        return None


def starts_drain(*, gang: bool, job_state: JobState, was: TaskState, ended: TaskState) -> bool:
    """1. Does this end of a task start a gang drain?"""
    return gang and job_state in GANG_PLACED and ended in DRAIN_TRIGGERS and was is not T.PREEMPTING


def preemption_move(state: TaskState) -> TaskState | None:
    """Where a preemption order sends a task: a started attempt must stop, an ASSIGNED one never ran."""
    if state in STARTED:
        return T.PREEMPTING
    if state is T.ASSIGNED:
        return T.PENDING
    return None


@dataclass(frozen=True)
class DrainPlan:
    trigger: int  # the index recorded as the one that started the drain
    requeue: tuple[int, ...]  # ended on their own with budget left: PENDING now, their count kept
    preempt: tuple[int, ...]  # started siblings: PREEMPTING
    release: tuple[int, ...]  # ASSIGNED siblings: PENDING, nothing ran


def plan_drain(members: Iterable[Member], ended: Collection[int], budgets: Budgets) -> DrainPlan:
    """2. What one drain does to each member; `ended` are the members whose end started it."""
    members = sorted(members, key=lambda m: m.index)
    if not ended:
        raise ValueError("a drain needs a member whose end started it")
    requeue, preempt, release = [], [], []
    for member in members:
        if member.index in ended:
            if budgets.used_up(member) is None:
                requeue.append(member.index)
            continue
        move = preemption_move(member.state)
        if move is T.PREEMPTING:
            preempt.append(member.index)
        elif move is T.PENDING:
            release.append(member.index)
    return DrainPlan(min(ended), tuple(requeue), tuple(preempt), tuple(release))


def end_while_preempting(reported: TaskState) -> TaskState:
    """3. What a task's end means when it was PREEMPTING: a clean exit is work done; any other
    exit (its peer died first, or the stop arrived as a kill) is the preemption itself."""
    if reported in (T.FAILED, T.KILLED):
        return T.PREEMPTED
    return reported


def drain_timeout(grace_period: float) -> float:
    """4. How long a task may stay PREEMPTING before the controller forces it to PREEMPTED."""
    return grace_period + DRAIN_SLACK


@dataclass(frozen=True)
class Verdict:
    requeue: bool  # True: the whole gang goes back to PENDING; False: it ends FAILED
    reason: str


def drain_verdict(members: Iterable[Member], budgets: Budgets) -> Verdict:
    """5. Once no member is PREEMPTING: FAILED if a member used up its budget or already ended for good,
    else back to PENDING as a unit."""
    members = sorted(members, key=lambda m: m.index)
    if any(m.state is T.PREEMPTING for m in members):
        raise ValueError("a drain completes only once no member is PREEMPTING")
    for member in members:
        why = budgets.used_up(member)
        if why:
            return Verdict(False, why)
    for member in members:
        if member.state in GANG_FINAL_ENDS:
            return Verdict(False, f"task {member.index} already ended {member.state}; its outcome stays on "
                                  "record, so the gang cannot restart whole")
    return Verdict(True, "every task goes back to PENDING, to be placed again as a unit")
