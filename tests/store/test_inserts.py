"""The history's and the audit log's insert statements: one each, shared by the modules that write those rows."""

from __future__ import annotations

from corral.store import audit, changes, inserts, jobs


def test_the_history_and_audit_inserts_are_one_statement_each() -> None:
    assert changes.INSERT_HISTORY is jobs.INSERT_HISTORY is inserts.INSERT_HISTORY
    assert changes.INSERT_AUDIT is audit.INSERT_AUDIT is inserts.INSERT_AUDIT
