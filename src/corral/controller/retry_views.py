"""The retry fields of a job's view: its place in its chain, said for people and listed for programs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from corral.core.retries import RetryState, retry_state_text
from corral.store.retries import chains_from

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection


async def retry_fields(connection: AsyncConnection, rows: list) -> dict[int, dict]:
    """JobView's retry fields for each job row (full `jobs` rows), with one query for all their chains. A job with
    no retry state and no root never had a policy, so it is alone in its chain: with only such jobs, no query."""
    chained = {r.id: r.retry_root_id or r.id for r in rows if r.retry_state is not None or r.retry_root_id is not None}
    chains = await chains_from(connection, chained) if chained else {}
    return {r.id: retry_view_fields(r, chains.get(r.id, [r.id])) for r in rows}


def retry_view_fields(r: Any, chain: list[int]) -> dict:
    """JobView's retry fields of one job row, given its chain (the ids of its retry chain, in order)."""
    later = chain[chain.index(r.id) + 1:] if r.id in chain else []
    state = RetryState(r.retry_state) if r.retry_state else None
    return dict(
        parent_job_id=r.parent_job_id, retry_count=r.retry_count, max_retries=r.max_retries,
        retry_policy=r.retry_policy, retry_cause=r.retry_cause, retry_due_at=r.retry_due_at, retry_chain=chain,
        retry_state=retry_state_text(state, r.retry_count, r.max_retries, r.retry_due_at,
                                     later[0] if later else None))
