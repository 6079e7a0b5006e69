"""The event stream's pure rules: how rows are typed, and which rows may be sent past a gap."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from corral.client.events import parse_sse
from corral.core.events import EVENT_TYPES, GAP_SETTLE_SECONDS, Stamp, event_type, ready, subject

NOW = 1_000_000.0


def test_the_subject_follows_from_the_row_shape():
    assert subject(None, None) == "worker"
    assert subject(7, None) == "job"
    assert subject(7, 70) == "task"


def test_rows_are_typed_by_shape_unless_the_table_names_their_handler():
    assert event_type(7, 70, "Worker", "SUCCESS", "RUNNING") == "task.state_changed"
    assert event_type(7, None, "ScheduleJobs", "SUCCESS", "RUNNING") == "job.state_changed"
    assert event_type(7, None, "ScheduleJobs", "SKIPPED", None) == "job.skipped"
    assert event_type(7, None, "Submit", "SUCCESS", "PENDING") == "job.submitted"
    assert event_type(None, None, "Register", "SUCCESS", "ALIVE") == "worker.registered"
    assert event_type(None, None, "Reaper", "SUCCESS", "LOST") == "worker.lost"
    # a handler named for jobs does not rename the task rows it writes
    assert event_type(7, 70, "Submit", "SUCCESS", "PENDING") == "task.state_changed"


def test_a_result_specific_entry_wins_over_the_handler_entry():
    assert event_type(7, None, "RetryJobs", "SUCCESS", None) == "job.retry_scheduled"
    assert event_type(7, None, "RetryJobs", "GIVE_UP", None) == "job.retry_exhausted"
    assert all(key[0] in ("job", "task", "worker") and len(key) in (2, 3) for key in EVENT_TYPES)


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


def test_server_sent_events_are_parsed_field_by_field():
    text = ("retry: 2000\n\n: keepalive\n\nid: 1\nevent: job.submitted\ndata: {\"a\": 1}\n\n"
            "id: 2\ndata: line one\ndata: line two\n\nid: 3\n")
    assert list(parse_sse(text.split("\n"))) == [
        {"id": "1", "event": "job.submitted", "data": "{\"a\": 1}"},
        {"id": "2", "data": "line one\nline two"},
    ]
