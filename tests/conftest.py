"""What every test shares: nothing of the user's own cache or login is read or written, and a move the transition tables
refuse raises (in this process and in every controller a test starts) instead of being set aside."""

import os

import pytest

os.environ["CORRAL_STRICT_MOVES"] = "1"  # read when corral.engine.coordinator is imported


@pytest.fixture(autouse=True, scope="session")
def private_cache(tmp_path_factory):
    """The bundle memo (corral.client.bundle.TreeMemo) lives in a cache of the run's own, for every process."""
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))


@pytest.fixture(autouse=True, scope="session")
def private_config(tmp_path_factory):
    """`corral login`'s credentials (corral.client.credentials) live in a config directory of the run's own, so a
    login of the user running the tests is never found in place of a test cluster's cluster.json."""
    os.environ["XDG_CONFIG_HOME"] = str(tmp_path_factory.mktemp("config"))
