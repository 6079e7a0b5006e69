"""Several controllers on one PostgreSQL database, as real processes: the store is migrated once, each handler runs
on one controller at a time, and one GPU is never booked twice."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import text

from corral.store.database import MIGRATIONS, make_engine
from tests.e2e.cluster import Cluster
from tests.postgres import scratch_database


def _alembic(connection=None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


async def _upgrade(url: str, revision: str) -> None:
    engine = make_engine(url)
    async with engine.begin() as connection:
        await connection.run_sync(lambda sync: command.upgrade(_alembic(sync), revision))
    await engine.dispose()


async def _revision(url: str) -> str:
    engine = make_engine(url)
    async with engine.connect() as connection:
        found = (await connection.execute(text("SELECT version_num FROM alembic_version"))).scalar()
    await engine.dispose()
    return found


def _controllers(root: Path, url: str, count: int) -> list[Cluster]:
    """`count` controllers on one database, each with a data directory of its own holding the same tokens."""
    tokens = {"admin": secrets.token_urlsafe(24), "join": secrets.token_urlsafe(24)}
    made = []
    for i in range(count):
        controller = Cluster(root / f"controller{i}", db_url=url)
        controller.data_dir.mkdir(parents=True, mode=0o700)
        (controller.data_dir / "tokens.json").write_text(json.dumps(tokens))
        (controller.data_dir / "tokens.json").chmod(0o600)
        made.append(controller)
    return made


def _log(controller: Cluster) -> str:
    return (controller.root / "controller.log").read_text(errors="replace")


async def test_three_controllers_starting_at_once_migrate_the_store_once(tmp_path):
    async with scratch_database() as url:
        await _upgrade(url, "0017")
        controllers = _controllers(tmp_path, url, 3)
        try:
            for controller in controllers:
                controller.spawn_controller()
            for controller in controllers:
                controller.wait_controller()
            head = ScriptDirectory.from_config(_alembic()).get_current_head()
            assert await _revision(url) == head
            migrated = [c for c in controllers if f"migrated the store from revision 0017 to {head}" in _log(c)]
            assert len(migrated) == 1, [_log(c)[-2000:] for c in controllers]
        finally:
            for controller in controllers:
                controller.stop()


async def test_jobs_submitted_through_two_controllers_share_one_gpu_in_turn(tmp_path):
    """Six one-GPU jobs, half submitted through each controller, one worker with one GPU: each runs once per
    attempt (its ledger line), all succeed, and no two attempts ran on the GPU at once."""
    ledger = tmp_path / "ledger"
    async with scratch_database() as url:
        first, second = _controllers(tmp_path, url, 2)
        try:
            first.start_controller()
            second.start_controller()
            first.start_worker("gpu-box", 2, "--gpus", "1")
            jobs = {}
            for i in range(6):
                through = (first, second)[i % 2]
                jobs[f"job{i}"] = through.submit(command=["sh", "-c", f"echo job{i} >> {ledger}; sleep 0.3"],
                                                 resources={"cpu": 1, "gpu": 1})
            for job_id in jobs.values():
                assert second.wait_end(job_id, timeout=60)["state"] == "SUCCEEDED"
            lines = ledger.read_text().split()
            ranges = []
            for tag, job_id in jobs.items():
                attempts = [a for task in first.tasks(job_id) for a in task["attempts"]]
                ran = [a for a in attempts if a["started_at"] is not None]
                assert lines.count(tag) == len(ran) == len(attempts), (tag, attempts)
                ranges += [(a["started_at"], a["finished_at"]) for a in ran]
            ranges.sort()
            overlapping = [(one, two) for one, two in zip(ranges, ranges[1:], strict=False) if one[1] > two[0]]
            assert not overlapping, ranges
            for controller in (first, second):
                assert "Traceback" not in _log(controller), _log(controller)[-3000:]
                assert "attempts_pkey" not in _log(controller)
        finally:
            first.stop()
            second.stop()
