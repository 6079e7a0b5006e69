"""The data directory's lock: one holder at a time, named to whoever else tries."""

from __future__ import annotations

import os

import pytest

from corral.controller.lock import DataDirInUse, hold, holder, process_started


def test_the_holder_is_named_to_a_second_taker_and_the_lock_is_free_after(tmp_path):
    assert holder(tmp_path) is None
    with hold(tmp_path, "http://127.0.0.1:8265"):
        live = holder(tmp_path)
        assert (live.pid, live.started, live.url) == (os.getpid(), process_started(os.getpid()), "http://127.0.0.1:8265")
        with pytest.raises(DataDirInUse) as refused, hold(tmp_path, "http://127.0.0.1:9999"):
            pass
        assert str(refused.value) == (f"the data directory {tmp_path} is in use by the controller with pid "
                                      f"{os.getpid()} at http://127.0.0.1:8265: stop it first "
                                      f"(corral down --data-dir {tmp_path})")
        assert holder(tmp_path) == live  # the refused one changed nothing
    assert holder(tmp_path) is None
    with hold(tmp_path, "http://127.0.0.1:9999"):
        assert holder(tmp_path).url == "http://127.0.0.1:9999"
    assert (tmp_path / "controller.lock").stat().st_mode & 0o077 == 0
