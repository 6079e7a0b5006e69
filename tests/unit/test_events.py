"""The event stream's pure rules: how rows are typed, and which rows may be sent past a gap."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.client.sse import Event, EventParser
from corral.core.events import EVENT_TYPES, GAP_SETTLE_SECONDS, REPLACEMENT, Stamp, event_type, ready, subject
from corral.core.lifecycle import SchedulingResult
from corral.core.retries import VERDICTS, RetryDecision, RetryState, RetryTarget, Verdict
from corral.core.retry_policy import RetryPolicy
from corral.core.states import JobState
from corral.engine.retries import record_verdict
from corral.engine.serving_handlers import SERVING_HANDLERS
from corral.store.changes import ChangeSet

NOW = 1_000_000.0


def test_the_subject_follows_from_the_row_shape():
    assert subject(None, None) == "worker"
    assert subject(7, None) == "job"
    assert subject(7, 70) == "task"
    assert subject(None, None, deployment_id=3) == "deployment"
    assert subject(None, None, deployment_id=3, replica_id=30) == "replica"


def test_rows_are_typed_by_shape_unless_the_table_names_their_handler():
    assert event_type(7, 70, "Worker", "SUCCESS", "RUNNING") == "task.state_changed"
    assert event_type(7, None, "ScheduleJobs", "SUCCESS", "RUNNING") == "job.state_changed"
    assert event_type(7, None, "ScheduleJobs", "SKIPPED", None) == "job.skipped"
    assert event_type(7, None, "Submit", "SUCCESS", "PENDING") == "job.submitted"
    assert event_type(None, None, "Register", "SUCCESS", "ALIVE") == "worker.registered"
    assert event_type(None, None, "Reaper", "SUCCESS", "LOST") == "worker.lost"
    # a handler named for jobs does not rename the task rows it writes
    assert event_type(7, 70, "Submit", "SUCCESS", "PENDING") == "task.state_changed"


def test_a_written_type_wins_over_the_shape():
    assert event_type(7, None, "RetryJobs", "NEED_RETRY", None, written="job.retry_scheduled") == \
        "job.retry_scheduled"
    assert event_type(7, None, "RetryJobs", "NEED_RETRY", None) == "job.need_retry"


@pytest.mark.parametrize("verdict", list(Verdict))
def test_each_retry_verdict_is_published_as_the_event_it_declares(verdict):
    """The record RetryJobs writes for a verdict, read back as an event, is the verdict's event: one row, one type."""
    target = RetryTarget(7, JobState.FAILED, RetryState.ARMED, 0, RetryPolicy(max_retries=1), 1.0, None)
    decision = RetryDecision(target, verdict)
    changes = ChangeSet(2.0)
    record_verdict(changes, decision, decision.effect, decision.message())
    (row,) = changes._history
    assert (row["handler"], row["result"]) == ("RetryJobs", VERDICTS[verdict].result)
    typed = event_type(row["job_id"], row["task_id"], row["handler"], str(row["result"]), row["to_state"],
                       written=row["event"])
    assert typed == VERDICTS[verdict].event


def test_verdict_events_are_distinct():
    assert len({effect.event for effect in VERDICTS.values()}) == len(VERDICTS)


def test_a_result_specific_entry_wins_over_the_handler_entry():
    assert event_type(None, None, "ScalingDeployment", "SUCCESS", "PROVISIONING", 3, 30) == "replica.provisioning"
    assert event_type(None, None, "ScalingDeployment", REPLACEMENT, "PROVISIONING", 3, 30) == "replica.replaced"
    subjects = ("job", "task", "worker", "deployment", "replica")
    assert all(key[0] in subjects and len(key) in (2, 3) and EVENT_TYPES[key].startswith(key[0] + ".")
               for key in EVENT_TYPES)


def test_serving_rows_are_typed_by_their_new_state_unless_the_table_names_them():
    def replica(handler, result, to_state):
        return event_type(None, None, handler, result, to_state, 3, 30)

    assert replica("HealthCheckReplica", "SUCCESS", "HEALTHY") == "replica.healthy"
    assert replica("HealthCheckReplica", "NEED_RETRY", "UNHEALTHY") == "replica.unhealthy"
    assert replica("ReplicaEviction", "SUCCESS", "TERMINATING") == "replica.evicted"
    assert replica("ScalingDeployment", "SUCCESS", "TERMINATING") == "replica.terminating"
    assert replica("TerminatingReplica", "SUCCESS", "TERMINATED") == "replica.terminated"
    assert replica("ProvisioningReplica", "SUCCESS", "DEGRADED") == "replica.started"
    assert event_type(None, None, "Deploy", "SUCCESS", "PENDING", 3) == "deployment.created"
    assert event_type(None, None, "Scale", "SUCCESS", "READY", 3) == "deployment.scaled"
    assert event_type(None, None, "CheckPendingDeployment", "SUCCESS", "SCALING", 3) == "deployment.scaling"
    assert event_type(None, None, "ScalingDeployment", "SUCCESS", "READY", 3) == "deployment.ready"


def test_every_serving_transition_has_a_type_of_its_own_subject():
    """Walks the serving handlers' declared transitions: each row they can write is typed for its subject."""
    for handler in SERVING_HANDLERS:
        kind = "deployment" if handler.entity == "deployment" else "replica"
        for result in SchedulingResult:
            transition = handler.transitions.for_result(result)
            if transition is None:
                continue
            new = transition.deployment if kind == "deployment" else transition.replica
            typed = event_type(None, None, handler.name, str(result), new, 3, 30 if kind == "replica" else None)
            assert typed.startswith(kind + ".") and typed != f"{kind}.state_changed", (handler.name, result)


def test_contiguous_rows_are_all_ready_however_young():
    rows = [Stamp(i, NOW) for i in range(11, 21)]
    assert ready(10, rows, NOW) == 10


def test_a_young_row_after_a_gap_is_held_back_and_so_is_everything_after_it():
    rows = [Stamp(11, NOW), Stamp(13, NOW), Stamp(14, NOW)]
    assert ready(10, rows, NOW) == 1


def test_a_gap_is_skipped_once_the_row_after_it_is_old_enough():
    rows = [Stamp(11, NOW - 60), Stamp(15, NOW - GAP_SETTLE_SECONDS - 0.1), Stamp(16, NOW)]
    assert ready(10, rows, NOW) == 3
    assert ready(0, [Stamp(500, NOW - 3600)], NOW) == 1  # the first row kept after pruning


@given(st.lists(st.tuples(st.integers(1, 3), st.floats(0, 20)), max_size=30), st.floats(0, 20))
def test_what_is_ready_is_a_prefix_whose_gaps_are_all_settled(steps, settle):
    rows, last = [], 0
    for step, age in steps:
        last += step
        rows.append(Stamp(last, NOW - age))
    count = ready(0, rows, NOW, settle)
    previous = 0
    for row in rows[:count]:
        assert row.id == previous + 1 or row.at <= NOW - settle
        previous = row.id
    if count < len(rows):
        held = rows[count]
        assert held.id != previous + 1 and held.at > NOW - settle


def parse(text: str, parser: EventParser | None = None) -> list[Event]:
    parser = parser or EventParser()
    return [e for e in map(parser.feed, text.split("\n")) if e is not None]


def test_server_sent_events_are_parsed_field_by_field():
    text = ("retry: 2000\n\n: keepalive\n\nid: 1\nevent: job.submitted\ndata: {\"a\": 1}\n\n"
            "id: 2\ndata: line one\ndata: line two\n\nid: 3\n")
    assert parse(text) == [Event("1", "job.submitted", {"a": 1}), Event("2", "message", "line one\nline two")]


def test_the_parser_keeps_ids_types_and_retry_by_the_formats_rules():
    parser = EventParser("5")
    events = parse("data: no id yet\n\nid: 6\nevent: a\ndata:x\n\ndata\ndata: y\n\nid: 7\0\ndata: z\n\n"
                   "retry: 1500\nretry: soon\n\nid: 8\nevent: b", parser)
    assert events == [Event("5", "message", "no id yet"), Event("6", "a", "x"), Event("6", "message", "\ny"),
                      Event("6", "message", "z")]  # an event type is for one event; an id with NUL is ignored
    assert parser.retry == 1.5
    assert parser.last_id == "6"  # id 8 came in an event cut off before its blank line: resume before it
    parser.feed("")
    assert parser.last_id == "8"  # an event with no data still moves the last id


@given(st.lists(st.sampled_from(["data: a", "data: b", "id: 9", "event: e", ": c", "retry: 10", ""]), max_size=20))
def test_an_event_is_dispatched_exactly_at_each_blank_line_after_data(lines):
    parser = EventParser()
    dispatched = [parser.feed(line) is not None for line in lines]
    expected, pending = [], False
    for line in lines:
        expected.append(line == "" and pending)
        pending = line.startswith("data") or (pending and line != "")
    assert dispatched == expected
