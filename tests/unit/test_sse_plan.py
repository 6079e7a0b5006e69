"""The event stream's plan, driven by a scripted fake: what it opens, hands out, sleeps, and when it gives up."""

from __future__ import annotations

import pytest

from corral.client.errors import CorralError
from corral.client.plans import NEXT_LINE, Call, Item, NextLine, Open, Sleep
from corral.client.sse import MAX_DELAY, follow_events, wait
from corral.core.states import JOB_STATE_HEADER

DROP = CorralError(None, "cannot reach the controller: connection reset")


def drive(plan, connections, steps=100):
    """Runs the plan; each Open takes the next script from `connections`: lines, ending in DROP, an error, or None.

    Returns what happened: ("open", headers' Last-Event-ID, query), ("event", id, data), ("sleep", seconds),
    and ("raised", error) or ("done",) at the end; it stops at an Open past the script.
    """
    log, script, reply, failure = [], iter(()), None, None
    for _ in range(steps):
        try:
            step = plan.throw(failure) if failure else plan.send(reply)
        except StopIteration:
            return [*log, ("done",)]
        except CorralError as error:
            return [*log, ("raised", error)]
        reply = failure = None
        if isinstance(step, Open):
            log.append(("open", step.call.kwargs["headers"].get("Last-Event-ID"), step.call.kwargs["params"]))
            if not connections:
                return log
            script = iter(connections.pop(0))
            first = next(script, None)
            if isinstance(first, CorralError):
                failure = first
            else:
                script = iter([first, *script])
        elif isinstance(step, NextLine):
            line = next(script, None)
            failure, reply = (line, None) if isinstance(line, CorralError) else (None, line)
        elif isinstance(step, Item):
            log.append(("event", step.value.id, step.value.data))
        elif isinstance(step, Sleep):
            log.append(("sleep", step.seconds))
    return log


def test_a_stream_dropped_mid_event_resumes_before_it_and_forgets_its_half():
    first = ["retry: 1000", "", "id: 1", "data: 1", "", "id: 2", "data: 2", DROP]
    second = ["id: 2", "data: 2", "", None]
    log = drive(follow_events({"job": 5, "deployment": None}, follow=False), [first, [None]], steps=30)
    assert log[-1][0] == "raised"  # not following: a drop is an error
    log = drive(follow_events({"job": 5}), [first, second, [DROP]], steps=30)
    assert log[:3] == [("open", None, {"job": 5, "follow": True}), ("event", "1", 1), ("sleep", 2.0)]
    assert log[3] == ("open", "1", {"job": 5, "follow": True, "after": "1"})
    assert log[4] == ("event", "2", 2)


def test_a_clean_end_without_follow_is_the_end_and_an_http_error_is_raised_at_once():
    assert drive(follow_events({}, follow=False), [["data: x", "", None]]) == [
        ("open", None, {"follow": False}), ("event", None, "x"), ("done",)]
    refused = CorralError(404, "no deployment named 'x'")
    assert drive(follow_events({"deployment": "x"}), [[refused]]) == [
        ("open", None, {"deployment": "x", "follow": True}), ("raised", refused)]


def test_failures_in_a_row_back_off_and_give_up_after_the_limit_unless_told_never_to():
    log = drive(follow_events({}, reconnects=3), [[DROP]] * 5)
    assert [entry[1] for entry in log if entry[0] == "sleep"] == [0.4, 0.8, 1.6]
    assert log[-1] == ("raised", DROP)
    endless = drive(follow_events({}, reconnects=None), [[DROP]] * 20, steps=40)
    assert all(entry[0] != "raised" for entry in endless)
    assert max(entry[1] for entry in endless if entry[0] == "sleep") == MAX_DELAY


def test_a_connection_that_delivers_resets_the_failure_count():
    log = drive(follow_events({}, reconnects=1), [[DROP], ["id: 1", "data: 1", "", DROP], [DROP], [DROP]])
    assert [entry for entry in log if entry[0] in ("sleep", "raised")] == [
        ("sleep", 0.4), ("sleep", 0.4), ("raised", DROP)]


@pytest.mark.parametrize("last", ["41", "not-a-number"])
def test_a_given_last_event_id_is_sent_as_the_header_and_as_after_when_it_is_an_id(last):
    log = drive(follow_events({}, last_event_id=last, follow=False), [[None]])
    expected = {"follow": False, "after": last} if last.isdigit() else {"follow": False}
    assert log[0] == ("open", last, expected)


def test_wait_reads_the_job_at_the_open_only_when_the_stream_does_not_name_it_active():
    for named, asked in (({JOB_STATE_HEADER: "RUNNING"}, False), ({JOB_STATE_HEADER: "SUCCEEDED"}, True), ({}, True)):
        plan = wait(5)
        assert isinstance(next(plan), Open)
        step = plan.send(named)
        assert (isinstance(step, Call) and step.path == "/api/v1/jobs/5") if asked else step is NEXT_LINE
