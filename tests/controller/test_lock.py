"""The data directory's lock: one holder at a time for SQLite, several for PostgreSQL, named to whoever else tries."""

from __future__ import annotations

import os

import pytest

from corral.controller.lock import DataDirInUse, hold, holders, process_started


def test_the_holder_is_named_to_a_second_taker_and_the_lock_is_free_after(tmp_path):
    assert holders(tmp_path) == []
    with hold(tmp_path, "http://127.0.0.1:8265"):
        [live] = holders(tmp_path)
        assert (live.pid, live.started, live.url) == (os.getpid(), process_started(os.getpid()), "http://127.0.0.1:8265")
        with pytest.raises(DataDirInUse) as refused, hold(tmp_path, "http://127.0.0.1:9999"):
            pass
        assert str(refused.value) == (f"the data directory {tmp_path} is in use by the controller with pid "
                                      f"{os.getpid()} at http://127.0.0.1:8265: stop it first "
                                      f"(corral down --data-dir {tmp_path})")
        assert holders(tmp_path) == [live]  # the refused one changed nothing
    assert holders(tmp_path) == []
    with hold(tmp_path, "http://127.0.0.1:9999"):
        assert [live.url for live in holders(tmp_path)] == ["http://127.0.0.1:9999"]
    assert (tmp_path / "controller.lock").stat().st_mode & 0o077 == 0


def test_shared_holders_are_all_named_and_exclude_an_exclusive_one(tmp_path):
    with hold(tmp_path, "http://a:1", shared=True), hold(tmp_path, "http://b:2", shared=True):
        assert sorted(live.url for live in holders(tmp_path)) == ["http://a:1", "http://b:2"]
        with pytest.raises(DataDirInUse, match="stop it first"), hold(tmp_path, "http://c:3"):
            pass
        with hold(tmp_path, "http://c:3", shared=True):
            assert len(holders(tmp_path)) == 3
        assert len(holders(tmp_path)) == 2  # one leaving takes only its own record
    assert holders(tmp_path) == []
    with hold(tmp_path, "http://d:4"), pytest.raises(DataDirInUse, match="SQLite store shares it with none"), \
            hold(tmp_path, "http://e:5", shared=True):
        pass
