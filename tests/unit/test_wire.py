"""Value hygiene shared by every request model: finite numbers, storable strings, ids in the store's range."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from corral.controller.params import _serialisable
from corral.core.deployment_spec import DeploymentSpec
from corral.core.protocol import MAX_REASON, HeartbeatRequest, PreemptedAck, RegisterRequest, TaskReport
from corral.core.retry_policy import RetryPolicy
from corral.core.spec import JobSpec
from corral.core.wire import CLEAN_JSON, MAX_ID, _check_strings, _name_the_fault, clean_json, clean_text, parse_id


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("spec", [
    lambda n: {"command": ["true"], "begin": n},
    lambda n: {"command": ["true"], "resources": {"cpu": n}},
    lambda n: {"command": ["true"], "resources": {"custom": {"tpu": n}}},
    lambda n: {"command": ["true"], "time_limit": n},
])
def test_a_job_spec_refuses_non_finite_numbers_in_any_field(spec, number):
    with pytest.raises(ValidationError, match="finite"):
        JobSpec.model_validate(spec(number))


def test_a_retry_policy_refuses_a_non_finite_delay():
    with pytest.raises(ValidationError, match="finite"):
        RetryPolicy.model_validate({"retry_delay": float("nan")})


@pytest.mark.parametrize("bad", ["a\x00b", "\ud800"])
@pytest.mark.parametrize("spec", [
    lambda s: {"command": [s]},
    lambda s: {"command": ["true", s]},
    lambda s: {"command": ["true"], "name": s},
    lambda s: {"command": ["true"], "env": {"A": s}},
    lambda s: {"command": ["true"], "labels": {s: "v"}},
    lambda s: {"command": ["true"], "labels": {"k": s}},
    lambda s: {"command": ["true"], "constraints": [f"k={s}"]},
])
def test_a_job_spec_refuses_nul_and_lone_surrogates_in_any_string(spec, bad):
    with pytest.raises(ValidationError, match="NUL|surrogate"):
        JobSpec.model_validate(spec(bad))


def test_a_deployment_and_a_worker_refuse_them_too():
    with pytest.raises(ValidationError, match="NUL"):
        DeploymentSpec.model_validate({"name": "m", "command": ["serve"], "env": {"X": "\x00"}})
    with pytest.raises(ValidationError, match="surrogate"):
        RegisterRequest.model_validate({"name": "w", "address": "h", "capacity": {"cpu": 1, "memory": 1},
                                        "labels": {"zone": "\udfff"}})


def test_clean_text_passes_ordinary_unicode():
    assert clean_text("naïve ✓ 日本") == "naïve ✓ 日本"


@pytest.mark.parametrize("field", ["after", "after_any"])
def test_job_ids_beyond_the_store_range_are_refused(field):
    with pytest.raises(ValidationError, match="less than or equal"):
        JobSpec.model_validate({"command": ["true"], field: [MAX_ID + 1]})
    assert JobSpec.model_validate({"command": ["true"], field: [MAX_ID, 3, 3]}).model_dump()[field] == [3, MAX_ID]


def test_heartbeat_reports_are_bounded_in_ids_and_length():
    report = {"task_id": 1, "attempt": 0, "state": "RUNNING", "at": 1.0}
    with pytest.raises(ValidationError):
        HeartbeatRequest.model_validate({"reports": [{**report, "task_id": 2**63}]})
    with pytest.raises(ValidationError):
        HeartbeatRequest.model_validate({"reports": [{**report, "at": float("nan")}]})
    with pytest.raises(ValidationError, match="at most"):
        HeartbeatRequest.model_validate({"reports": [report] * 10_001})


@pytest.mark.parametrize("holding", [[[0, 0]], [[1, -1]], [[2**63, 0]], [[1, 0, 0]], [[1, 0]] * 10_001])
def test_the_attempts_a_heartbeat_holds_are_bounded_in_ids_and_length(holding):
    assert HeartbeatRequest.model_validate({"holding": [[1, 0], [7, 2]]}).holding == [(1, 0), (7, 2)]
    with pytest.raises(ValidationError):
        HeartbeatRequest.model_validate({"holding": holding})


@pytest.mark.parametrize(("text", "expected"), [
    ("12", 12), ("0", 0), (str(MAX_ID), MAX_ID), (str(MAX_ID + 1), None), ("²", None), ("-1", None), ("", None),
])
def test_parse_id_takes_only_ascii_digits_in_range(text, expected):
    assert parse_id(text) == expected


def test_an_error_body_serialises_whatever_the_input_was():
    body = _serialisable({"input": [float("nan"), float("-inf"), "\ud800", {"\udfff": 1.5}]})
    assert json.loads(json.dumps(body, allow_nan=False)) == {"input": ["nan", "-inf", "\\ud800", {"\\udfff": 1.5}]}


def test_a_worker_reason_is_made_storable_and_cut_never_refused():
    long_argument = "a" * 10**6
    report = TaskReport(task_id=1, attempt=0, state="FAILED", at=1.0,
                        reason=f"cannot start ['x\x00{long_argument}\udc80']")
    assert len(report.reason) == MAX_REASON and report.reason.startswith("cannot start ['x\\x00aaa")
    assert PreemptedAck(attempt=0, epoch=1, reason="gone \udc80").reason == "gone \\udc80"


TEXTS = st.text(alphabet=st.sampled_from(["a", "é", "日", "\x00", "\ud800", "\udfff", " "]), max_size=4)
VALUES = st.recursive(st.none() | st.integers() | st.floats(allow_nan=False) | TEXTS,
                      lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                      | st.dictionaries(TEXTS, inner, max_size=4), max_leaves=20)


def _error(check, value) -> str | None:
    try:
        check(value, "body")
    except ValueError as error:
        return str(error)
    return None


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_strings_are_checked_quickly_with_the_same_error_as_the_walk_that_names_positions(value):
    assert _error(_check_strings, value) == _error(_name_the_fault, value)


_json_text = st.text(alphabet=st.characters(exclude_categories=()) | st.sampled_from("\x00\ud800\udfff\ud7ff\\u"),
                     max_size=8)
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | _json_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_json_text, inner, max_size=4), max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(value=_json_values, ascii_only=st.booleans(), encoding=st.sampled_from(["utf-8", "utf-8-sig", "utf-16",
                                                                              "utf-32"]))
def test_a_body_clean_json_passes_holds_no_string_clean_text_refuses(value, ascii_only, encoding):
    """`clean_json` may say "walk them" of a clean body, never "clean" of one with a NUL or a lone surrogate, whatever
    the encoding `json.loads` reads it in (surrogates written raw where the JSON is not kept ASCII)."""
    body = json.dumps(value, ensure_ascii=ascii_only).encode(encoding, "surrogatepass")
    try:
        parsed = json.loads(body)
    except ValueError:
        return  # refused before any string is looked at
    if clean_json(body):
        _check_strings(parsed, "")


@pytest.mark.parametrize("body", [
    b'{"wait": 0, "pythons": ["3.12\\u0000"]}', b'{"wait": 0, "pythons": ["3.12\\ud800"]}',
    b'{"wait": 0, "pythons": ["3.12\xed\xa0\x80"]}', '{"wait": 0, "pythons": ["3.12\\u0000"]}'.encode("utf-16"),
])
def test_a_heartbeat_parsed_from_bytes_refuses_nul_and_lone_surrogates(body):
    with pytest.raises(ValidationError, match="pythons.*(NUL|valid Unicode)"):
        HeartbeatRequest.model_validate(json.loads(body), context=CLEAN_JSON if clean_json(body) else None)


def test_a_body_with_neither_escape_nor_surrogate_bytes_is_clean_json():
    assert clean_json(b'{"wait": 0, "holding": [[1, 0]], "reports": [{"reason": "caf\xc3\xa9"}]}')
