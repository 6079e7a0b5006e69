"""The controller's garbage collector once it has started: start-up frozen, its collections less often."""

from __future__ import annotations

import gc

from fastapi.testclient import TestClient

from corral.controller.app import create_app
from corral.controller.settings import ControllerSettings
from corral.core.collector import OLDEST, YOUNG


def test_a_started_controller_freezes_start_up_and_collects_less_often(tmp_path):
    """Over 2,000 separate jobs Python's (700, 10, 10) made the controller's collector walk the live objects of every
    request and pass in flight some 770 times, six of them the whole heap, to free next to nothing."""
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        with TestClient(create_app(ControllerSettings(data_dir=tmp_path, admin_token="t"))):
            assert gc.get_threshold() == (YOUNG, 10, OLDEST)
            assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
