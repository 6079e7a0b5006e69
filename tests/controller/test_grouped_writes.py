"""GroupedWrites: concurrent writes committed together, each answered once its own is committed, a failing one
failing alone."""

from __future__ import annotations

import asyncio

import pytest

from corral.controller.grouped_writes import GroupedWrites
from corral.core.spec import JobSpec
from corral.store.database import Conflict, sqlite_url
from corral.store.job_views import existing_job_ids
from corral.store.jobs import insert_job
from corral.store.store import Store


@pytest.fixture
async def store(tmp_path):
    opened = await Store.open(sqlite_url(tmp_path / "corral.db"))
    yield opened
    await opened.close()


def _job(key: str):
    async def write(connection):
        return await insert_job(connection, JobSpec(command=["true"]), key, 1.0)
    return write


async def test_concurrent_writes_share_commits_and_each_gets_its_own_result(store) -> None:
    commits = []
    store.on_commit.append(lambda: commits.append(1))
    grouped = GroupedWrites(store)
    ids = await asyncio.wait_for(asyncio.gather(*(grouped.write(_job(f"k{i}")) for i in range(20))), 30)
    assert len(set(ids)) == 20
    assert len(commits) < 20  # those that came while one was written went in the next, together
    async with store.read() as connection:
        assert await existing_job_ids(connection, ids) == set(ids)


async def test_a_failing_write_fails_alone_and_the_others_of_its_group_are_committed(store) -> None:
    grouped = GroupedWrites(store)
    first = await grouped.write(_job("taken"))
    results = await asyncio.wait_for(asyncio.gather(
        *(grouped.write(_job("taken" if i == 3 else f"k{i}")) for i in range(8)), return_exceptions=True), 30)
    assert isinstance(results[3], Conflict)
    made = [r for i, r in enumerate(results) if i != 3]
    assert all(isinstance(job_id, int) for job_id in made)
    async with store.read() as connection:
        assert await existing_job_ids(connection, [first, *made]) == {first, *made}
