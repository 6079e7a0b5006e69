"""What every test shares: nothing of the user's own cache is read or written."""

import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def private_cache(tmp_path_factory):
    """The bundle memo (corral.client.bundle.TreeMemo) lives in a cache of the run's own, for every process."""
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))
