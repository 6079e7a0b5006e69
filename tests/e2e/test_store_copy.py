"""SQLite serves one controller, and `corral store copy` moves its store to PostgreSQL: real processes, real CLI."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from tests.e2e.cluster import Cluster, free_port
from tests.postgres import scratch_database
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e


def corral(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "corral", *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def assert_refused(run: subprocess.CompletedProcess, *said: str) -> None:
    assert run.returncode == 1 and run.stdout == "", run.stdout + run.stderr
    assert len(run.stderr.splitlines()) == 1 and run.stderr.startswith("error: "), run.stderr
    assert all(part in run.stderr for part in said), run.stderr


def test_a_second_controller_on_the_same_sqlite_store_is_refused_whatever_its_data_directory(tmp_path):
    database = tmp_path / "shared.db"
    (tmp_path / "first").mkdir()
    first = Cluster(tmp_path / "first", db_url=f"sqlite:///{database}")
    first.start_controller()
    try:
        second = corral("controller", "--data-dir", str(tmp_path / "second"), "--port", str(free_port()),
                        "--db", f"sqlite:///{database}")
        assert_refused(second, f"the SQLite store {database} is in use by pid {first.controller.pid} ({first.url})",
                       "for several controllers use PostgreSQL")
        assert first.get("/healthz") is not None  # the first one is untouched
    finally:
        first.stop()
    assert first.controller.returncode is not None
    assert_refused(corral("store", "copy", "--from", f"sqlite:///{database}", "--to", "sqlite:///elsewhere.db"),
                   "is not a PostgreSQL database")  # the lock went with its holder: the copy gets past it


def jobs_of(cluster: Cluster) -> dict[int, str]:
    return {job["id"]: job["state"] for job in cluster.get("/api/v1/jobs", limit=100)["items"]}


async def test_a_sqlite_store_copied_to_postgresql_serves_the_same_jobs_users_and_deployments(tmp_path):
    on_sqlite = Cluster(tmp_path)
    on_sqlite.start_controller()
    on_sqlite.start_worker("w1", 2)
    finished = on_sqlite.submit(name="finished", command=["true"], resources={"cpu": 1})
    failed = on_sqlite.submit(name="failed", command=["false"], resources={"cpu": 1})
    waiting = on_sqlite.submit(name="waiting", command=["true"], resources={"cpu": 64})  # fits nowhere
    assert on_sqlite.wait_end(finished)["state"] == "SUCCEEDED" and on_sqlite.wait_end(failed)["state"] == "FAILED"
    assert on_sqlite.job(waiting)["state"] == "PENDING"
    assert on_sqlite.http.post("/api/v1/users", json={"name": "ada", "projects": {"ml": "member"}}).is_success
    ada_token = on_sqlite.http.post("/api/v1/tokens", json={"user": "ada"}).json()["token"]
    deployment = {"name": "svc", "command": ["true"], "resources": {"cpu": 64}}
    assert on_sqlite.http.post("/api/v1/deployments", json=deployment).is_success
    before = wait_for(lambda: len(jobs := jobs_of(on_sqlite)) == 4 and jobs, 30, "the deployment's replica job")
    source = f"sqlite:///{on_sqlite.data_dir / 'corral.db'}"

    async with scratch_database() as url:
        assert_refused(corral("store", "copy", "--from", source, "--to", url),
                       f"is in use by pid {on_sqlite.controller.pid} ({on_sqlite.url})")
        on_sqlite.stop()
        copied = corral("store", "copy", "--from", source, "--to", url)
        assert copied.returncode == 0, copied.stderr
        rows = {line.split()[0]: int(line.split()[1]) for line in copied.stdout.splitlines() if line.endswith(" rows")}
        assert rows["jobs"] == len(before) and rows["workers"] == 1 and rows["users"] == 1
        assert rows["user_tokens"] == 1 and rows["deployments"] == 1 and rows["history"] > 0
        assert "corral controller --db postgresql+asyncpg://postgres@127.0.0.1:5432/" in copied.stdout
        assert f"--data-dir {on_sqlite.data_dir}" in copied.stdout
        # the destination holds rows now (the refused copy above wrote none, or this one would have been refused)
        assert_refused(corral("store", "copy", "--from", source, "--to", url), "the destination already holds rows")

        on_postgresql = Cluster(tmp_path, db_url=url)
        on_postgresql.start_controller()
        try:
            assert jobs_of(on_postgresql) == before
            assert [w["name"] for w in on_postgresql.get("/api/v1/workers")] == ["w1"]
            assert [d["name"] for d in on_postgresql.get("/api/v1/deployments")] == ["svc"]
            whoami = httpx.get(f"{on_postgresql.url}/api/v1/whoami", headers={"Authorization": f"Bearer {ada_token}"})
            assert whoami.status_code == 200 and whoami.json()["name"] == "ada"
            assert on_postgresql.submit(command=["true"]) == max(before) + 1  # the sequences were set past the copy
        finally:
            on_postgresql.stop()


@pytest.mark.parametrize(("source", "destination", "said"), [
    ("postgresql://postgres@127.0.0.1/test", "postgresql://postgres@127.0.0.1/test", "--from 'postgresql://"),
    ("sqlite:///{tmp}/none.db", "postgresql://postgres@127.0.0.1/test", "there is no SQLite store at"),
    ("sqlite:///{tmp}/corral.db", "sqlite:///{tmp}/other.db", "is not a PostgreSQL database"),
    ("sqlite:///{tmp}/corral.db", "not a url", "is not a PostgreSQL database"),
])
def test_copy_refuses_urls_of_the_wrong_kind_in_one_line(tmp_path, source, destination, said):
    (tmp_path / "corral.db").touch()
    assert_refused(corral("store", "copy", "--from", source.format(tmp=tmp_path),
                          "--to", destination.format(tmp=tmp_path)), said)
