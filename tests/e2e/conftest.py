from __future__ import annotations

import pytest

from tests.e2e.cluster import Cluster
from tests.postgres import scratch_database


@pytest.fixture
def cluster(tmp_path):
    """A controller and two workers, as `corral up` would start them."""
    running = Cluster(tmp_path)
    running.start_controller()
    running.start_worker("w1")
    running.start_worker("w2")
    yield running
    running.stop()


@pytest.fixture
def bare_cluster(tmp_path):
    """A controller with no worker yet: the test starts what it needs."""
    running = Cluster(tmp_path)
    running.start_controller()
    yield running
    running.stop()


@pytest.fixture
async def postgres_cluster(tmp_path):
    """A controller on a PostgreSQL database of its own, with two workers."""
    async with scratch_database() as url:
        running = Cluster(tmp_path, db_url=url)
        running.start_controller()
        running.start_worker("w1")
        running.start_worker("w2")
        try:
            yield running
        finally:
            running.stop()
