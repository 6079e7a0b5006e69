"""The audit log's store functions on SQLite and PostgreSQL: rows filtered, newest first, bounded; retention."""

from __future__ import annotations

from corral.store.audit import AuditFilter, add_audit, audit_rows, prune_audit


def _row(at: float, actor: str, action: str, **more) -> dict:
    return dict(at=at, actor=actor, action=action, job_id=None, detail={},
                **{"role": None, "object": None, "address": None, "outcome": None, **more})


async def _fill(store) -> None:
    async with store.write() as connection:
        await add_audit(connection, [
            _row(100.0, "alice", "job.submit", role="member", object="job 1", address="10.0.0.1", outcome=201),
            _row(200.0, "bob", "job.cancel", role="member", object="job 1", address="10.0.0.2", outcome=403),
            _row(300.0, "alice", "job.cancel", role="member", object="job 1", address="10.0.0.1", outcome=200),
            _row(400.0, "controller", "job.retry_dispatched"),  # the controller's own: no role, object, outcome
        ])


async def test_rows_are_read_newest_first_filtered_and_bounded(store) -> None:
    await _fill(store)
    async with store.read() as connection:
        every = await audit_rows(connection, AuditFilter(), 100)
        assert [(r.actor, r.action, r.at) for r in every] == [
            ("controller", "job.retry_dispatched", 400.0), ("alice", "job.cancel", 300.0),
            ("bob", "job.cancel", 200.0), ("alice", "job.submit", 100.0)]
        assert (every[2].role, every[2].object, every[2].address, every[2].outcome) == (
            "member", "job 1", "10.0.0.2", 403)
        assert [r.at for r in await audit_rows(connection, AuditFilter(actor="alice"), 100)] == [300.0, 100.0]
        assert [r.actor for r in await audit_rows(connection, AuditFilter(action="job.cancel"), 100)] == [
            "alice", "bob"]
        assert [r.at for r in await audit_rows(connection, AuditFilter(since=200.0, until=400.0), 100)] == [
            300.0, 200.0]
        assert [r.at for r in await audit_rows(connection, AuditFilter(), 2)] == [400.0, 300.0]
        assert await audit_rows(connection, AuditFilter(actor="carol"), 100) == []


async def test_retention_prunes_old_rows_but_keeps_the_newest(store) -> None:
    await _fill(store)
    async with store.write() as connection:
        assert await prune_audit(connection, 250.0) == 2
    async with store.read() as connection:
        assert [r.at for r in await audit_rows(connection, AuditFilter(), 100)] == [400.0, 300.0]
    async with store.write() as connection:
        assert await prune_audit(connection, 1000.0) == 1  # the newest stays: ids never start again
    async with store.read() as connection:
        assert [r.at for r in await audit_rows(connection, AuditFilter(), 100)] == [400.0]
