"""The controller's garbage collector once it has started: start-up frozen, the youngest generation seldom collected."""

from __future__ import annotations

import gc

from fastapi.testclient import TestClient

from corral.controller.app import create_app
from corral.controller.settings import ControllerSettings
from corral.core.collector import YOUNG


def test_a_started_controller_collects_its_youngest_generation_every_young_allocations(tmp_path):
    """A thousand separate jobs made the collector run some 200 times at Python's 700, each run walking the live
    objects of every request and pass in flight; start-up's objects are frozen out of every collection."""
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, *before[1:])
        with TestClient(create_app(ControllerSettings(data_dir=tmp_path, admin_token="t"))):
            assert gc.get_threshold() == (YOUNG, *before[1:])
            assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
