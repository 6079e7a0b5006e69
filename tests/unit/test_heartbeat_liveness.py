"""Which heartbeats say only that their worker lives, and so are marked together (corral.engine.reports.SeenMarks)."""

from __future__ import annotations

import pytest

from corral.core.protocol import HeartbeatRequest


@pytest.mark.parametrize("body, only", [
    ({}, True),
    ({"wait": 2.0}, True),
    ({"gpus": []}, True),  # no device read: nothing to store
    ({"reports": [{"task_id": 1, "attempt": 0, "state": "RUNNING", "at": 1.0}]}, False),
    ({"pythons": []}, False),  # an empty list is a fact: it replaces what was stored
    ({"environments": []}, False),
    ({"gpus": [{"index": 0, "memory_used": 1, "memory_total": 2}]}, False),
])
def test_only_a_heartbeat_carrying_no_report_nor_fact_is_liveness_alone(body, only):
    assert HeartbeatRequest.model_validate(body).only_liveness is only
