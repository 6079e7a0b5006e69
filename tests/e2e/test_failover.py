"""End to end: two controllers on one PostgreSQL database; workers, the CLI and a standalone router given both
URLs keep working after `kill -9` of the one they were using."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.e2e.cluster import Cluster, free_port
from tests.e2e.test_serving import deploy, healthy
from tests.postgres import scratch_database
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture
async def controllers(tmp_path) -> AsyncIterator[tuple[Cluster, Cluster]]:
    """Two controllers on one database with the same tokens (the second's data directory gets the first's
    tokens.json), and worker w1 given both URLs, the first one first."""
    async with scratch_database() as url:
        first, second = Cluster(tmp_path, db_url=url), Cluster(tmp_path / "second", db_url=url)
        try:
            first.start_controller()
            second.data_dir.mkdir(parents=True)
            shutil.copy(first.data_dir / "tokens.json", second.data_dir / "tokens.json")
            second.start_controller()
            assert second.admin_token == first.admin_token
            first.start_worker("w1", 4, "--controller", f"{first.url},{second.url}")
            yield first, second
        finally:
            first.stop()
            second.stop()


def corral(urls: str, token: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CORRAL_URL": urls, "CORRAL_TOKEN": token}
    return subprocess.run([sys.executable, "-m", "corral", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def test_a_worker_and_the_cli_given_both_controllers_keep_working_after_the_first_is_killed(controllers):
    first, second = controllers
    across = first.submit(command=["sh", "-c", "sleep 2; echo across"])
    first.wait_running(across)
    first.kill(first.controller)

    after = second.submit(command=["sh", "-c", "echo after"])
    assert second.wait_end(after, timeout=60)["state"] == "SUCCEEDED"
    assert second.logs(after) == "after\n"  # uploaded to the controller the worker moved to
    assert second.wait_end(across, timeout=60)["state"] == "SUCCEEDED"
    assert f"controller {first.url} failed" in first.log("w1")

    both = f"{first.url},{second.url}"
    listed = corral(both, first.admin_token, "jobs")
    assert listed.returncode == 0, listed.stderr
    assert str(after) in listed.stdout and str(across) in listed.stdout
    submitted = corral(both, first.admin_token, "submit", "--wait", "--", "true")
    assert submitted.returncode == 0, submitted.stderr + submitted.stdout


def test_a_bad_controller_url_is_one_line_of_error(tmp_path):
    for flag, said in [("http://a:1,ftp://b", "'ftp://b' is not http(s)://host[:port]"),
                       ("http://a:1,", "an empty controller URL"),
                       ("http://a:99999", "'http://a:99999': Port out of range")]:
        run = subprocess.run([sys.executable, "-m", "corral", "worker", "--controller", flag],
                             capture_output=True, text=True, timeout=60, env={**os.environ, "CORRAL_JOIN_TOKEN": "x"})
        assert run.returncode == 2 and said in run.stderr and "Traceback" not in run.stderr, run.stderr
    run = corral("http://a:1,ftp://b", "x", "jobs")
    assert run.returncode == 1 and run.stderr.strip().startswith("error:") and "ftp://b" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_a_standalone_router_given_both_controllers_answers_every_request_through_the_first_ones_death(
        controllers):
    first, second = controllers
    deploy(first, "steady", min_replicas=1)
    healthy(first, "steady", 1)
    port = free_port()
    router = subprocess.Popen(
        [sys.executable, "-m", "corral", "router", "--controller", f"{first.url},{second.url}", "--port", str(port)],
        env={**os.environ, "CORRAL_TOKEN": first.admin_token}, stdout=(first.root / "router.log").open("ab"),
        stderr=subprocess.STDOUT, start_new_session=True)
    url, headers = f"http://127.0.0.1:{port}/serve/steady/whoami", {"Authorization": f"Bearer {first.admin_token}"}
    answered: list[int] = []
    lost: list[str] = []
    stop = threading.Event()

    def ask() -> int:
        """One request, tried at most 3 times: a connection the router dropped is not a request it lost."""
        for _ in range(3):
            try:
                return httpx.get(url, headers=headers, timeout=10).status_code
            except httpx.TransportError as error:
                last = error
        lost.append(repr(last))
        return 0

    def loop() -> None:
        while not stop.is_set():
            answered.append(ask())

    try:
        wait_for(lambda: _status(url, headers) == 200, 30, "the router to serve 'steady'")
        caller = threading.Thread(target=loop)
        caller.start()
        wait_for(lambda: len(answered) >= 20, 30, "requests before the kill")
        first.kill(first.controller)
        killed_at = len(answered)
        wait_for(lambda: len(answered) >= killed_at + 50, 60, "requests after the kill")
        # Its catalog now comes from the second controller: a deployment made there after the kill is served.
        deploy(second, "later", min_replicas=1)
        later = url.replace("steady", "later")
        wait_for(lambda: _status(later, headers) == 200, 60, "the router to serve 'later'")
        stop.set()
        caller.join(30)
    finally:
        stop.set()
        os.killpg(router.pid, signal.SIGTERM)
        router.wait(30)
    assert lost == [] and set(answered) == {200}, (lost, sorted(set(answered)))
    assert len(answered) >= 70


def _status(url: str, headers: dict[str, str]) -> int:
    try:
        return httpx.get(url, headers=headers, timeout=5).status_code
    except httpx.HTTPError:
        return 0
