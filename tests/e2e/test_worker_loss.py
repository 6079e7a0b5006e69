"""After a controller restart, worker loss is judged on each worker's recorded last heartbeat."""

from __future__ import annotations

import sqlite3
import time

import pytest

from tests.e2e.cluster import Cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e


def test_a_worker_dead_through_a_long_outage_is_lost_soon_after_restart_and_a_live_one_is_kept(tmp_path):
    cluster = Cluster(tmp_path, loss_timeout=60)  # before: nothing was reaped for 60 s after the restart
    cluster.start_controller()
    try:
        cluster.start_worker("live")
        cluster.start_worker("dead")
        ids = {w["name"]: w["id"] for w in cluster.get("/api/v1/workers")}
        cluster.kill(cluster.workers["dead"])
        cluster.kill(cluster.controller)
        with sqlite3.connect(cluster.data_dir / "corral.db") as db:  # as if the outage had lasted two minutes
            db.execute("UPDATE workers SET last_heartbeat = ?", (time.time() - 120,))
        cluster.start_controller()
        started = time.monotonic()

        def states():
            return {w["id"]: w["state"] for w in cluster.get("/api/v1/workers")}

        wait_for(lambda: states()[ids["dead"]] == "LOST", 20, "the dead worker to be declared lost")
        assert time.monotonic() - started < 20
        assert states()[ids["live"]] == "ALIVE"  # it called back within the grace, and keeps its id
        job = cluster.submit(command=["true"])
        assert cluster.wait_end(job)["state"] == "SUCCEEDED"
        assert cluster.tasks(job)[0]["worker_id"] == ids["live"]
    finally:
        cluster.stop()
