"""Tasks run as their owner's local account on a root worker (BuildOrder.run_as): one user's task cannot read
another's files or the worker's; a worker that is not root runs every task as itself."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from corral.core.protocol import StartOrder, StopOrder
from corral.worker import runner as runner_module
from corral.worker.accounts import Account, NoAccount, read_no_follow
from corral.worker.containment import reap_record
from tests.worker.support import CONTAINMENTS, Harness, build_order

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="running a task as another user needs a root worker")


@pytest.fixture(scope="module")
def accounts():
    """Two local accounts of this test's own, removed at the end."""
    names = [f"crl{os.getpid()}{who}" for who in ("alice", "bob")]
    for name in names:
        subprocess.run(["useradd", "-M", "-d", f"/nonexistent/{name}", name], check=True, capture_output=True)
    try:
        yield dict(zip(("alice", "bob"), names, strict=True))
    finally:
        for name in names:
            subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture
def work_dir():
    """Not under pytest's tmp_path, which only root may cross: the tasks' accounts must reach their directories."""
    path = Path(tempfile.mkdtemp(prefix="corral-run-as-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(params=CONTAINMENTS)
def harness(work_dir, request):
    return Harness(work_dir, containment=request.param)


async def run(harness: Harness, command: list[str], task_id: int, **fields):
    await harness.act(build_order(command, task_id=task_id, **fields))
    await harness.act(StartOrder(task_id=task_id, attempt=0))
    return await harness.ended(task_id)


def output(harness: Harness, task_id: int, stream: str = "stdout") -> str:
    return (harness.attempt_dir(task_id) / stream).read_text()


async def test_a_task_runs_as_its_owner_with_its_home_and_cannot_read_another_users_files(harness, accounts):
    alice, bob = accounts["alice"], accounts["bob"]
    report = await run(harness, ["sh", "-c", "id -un; echo \"$HOME $USER $LOGNAME\"; echo secret > mine; pwd"], 1,
                       run_as=bob)
    assert report.state == "SUCCEEDED", output(harness, 1, "stderr")
    name, env, cwd = output(harness, 1).splitlines()
    assert (name, env) == (bob, f"/nonexistent/{bob} {bob} {bob}")
    bobs = Path(cwd)
    assert (bobs / "mine").stat().st_uid == Account.named(bob, "w1").uid
    assert bobs.stat().st_mode & 0o777 == 0o700

    report = await run(harness, ["sh", "-c", f"id -un; cat {bobs / 'mine'}"], 2, run_as=alice)
    assert report.state == "FAILED"
    assert output(harness, 2) == f"{alice}\n"
    assert "Permission denied" in output(harness, 2, "stderr")


async def test_a_task_run_as_its_owner_cannot_list_the_workers_directory_nor_read_another_attempts(harness,
                                                                                                   accounts):
    await run(harness, ["echo", "bob's output"], 1, run_as=accounts["bob"])
    tries = [f"ls {harness.work_dir}", f"ls {harness.work_dir / 'tasks'}", f"cat {harness.attempt_dir(1) / 'stdout'}"]
    report = await run(harness, ["sh", "-c", "".join(f"{attempt} && exit 1; " for attempt in tries) + "exit 3"], 2,
                       run_as=accounts["alice"])
    assert (report.state, report.exit_code) == ("FAILED", 3), output(harness, 2)
    assert output(harness, 2, "stderr").count("Permission denied") == 3
    assert harness.work_dir.stat().st_mode & 0o777 == 0o711


async def test_a_run_as_with_no_local_account_fails_the_attempt_saying_so(harness):
    await harness.act(build_order(["true"], run_as="nosuchuser", start=True))
    report = await harness.ended()
    assert harness.states() == ["BUILDING", "FAILED"]
    assert report.reason == "no local account 'nosuchuser' on worker w1"


async def test_a_worker_that_is_not_root_runs_every_task_as_itself(work_dir, accounts):
    harness = Harness(work_dir, as_root=False)
    report = await run(harness, ["id", "-un"], 1, run_as=accounts["alice"])
    assert report.state == "SUCCEEDED"
    assert output(harness, 1) == "root\n"
    assert harness.attempt_dir(1).stat().st_uid == 0


def test_an_account_is_its_uid_primary_gid_and_groups_and_a_missing_one_is_named_with_the_worker(accounts):
    account = Account.named(accounts["bob"], "w1")
    assert account.gid in account.groups and account.env()["USER"] == accounts["bob"]
    with pytest.raises(NoAccount, match="no local account 'nosuchuser' on worker w1"):
        Account.named("nosuchuser", "w1")


def test_launch_changes_user_in_the_shim_or_through_setpriv_in_a_cgroup(tmp_path, accounts):
    account = Account.named(accounts["bob"], "w1")
    record = tmp_path / "processes.json"
    argv = runner_module._launch(["true"], tmp_path, {"PATH": os.defpath}, record, None, account=account)
    assert argv[-5:] == [str(record), "--user", account.credentials(), "--", "true"]
    argv = runner_module._launch(["true"], tmp_path, {"PATH": os.defpath}, record, tmp_path / "cg", account=account)
    assert argv[-6:] == [shutil.which("setpriv"), f"--reuid={account.uid}", f"--regid={account.gid}",
                         f"--groups={','.join(map(str, account.groups))}", "--", "true"]


async def test_a_task_that_swaps_its_files_for_links_to_roots_gets_nothing_shipped_uploaded_or_killed(harness,
                                                                                                       accounts):
    secret = harness.work_dir / "root-only"
    secret.write_text("root's secret")
    swap = f"rm -f stdout checkpoint; ln -s {secret} stdout; ln -s {secret} checkpoint"
    report = await run(harness, ["sh", "-c", swap], 1, run_as=accounts["bob"])
    assert report.state == "SUCCEEDED", output(harness, 1, "stderr")
    directory = harness.attempt_dir(1)
    with pytest.raises(OSError):
        read_no_follow(directory / "stdout")
    with pytest.raises(OSError):
        read_no_follow(directory / "checkpoint")
    forged = directory / "forged.json"
    forged.write_text('{"shim": [1, 0], "members": [[1, 0]]}')
    os.chown(forged, Account.named(accounts["bob"], "w1").uid, -1)
    assert reap_record(forged) == 0 and forged.exists()  # not the worker's: ignored


async def test_an_exec_into_a_task_run_as_its_owner_runs_as_that_owner_too(harness, accounts):
    await harness.act(build_order(["sleep", "30"], run_as=accounts["bob"]))
    await harness.act(StartOrder(task_id=1, attempt=0))
    place = runner_module._Place(harness.runner, harness.runner._attempts[(1, 0)])
    read, write = os.pipe()
    stdin = os.open(os.devnull, os.O_RDONLY)
    try:
        process = await place.launch(["id", "-un"], stdin, write, write, False, "whoami")
    finally:
        os.close(write)
        os.close(stdin)
    async with asyncio.timeout(10):
        assert await process.wait() == 0
    with os.fdopen(read, "rb") as printed:
        assert printed.read().decode() == f"{accounts['bob']}\n"
    await harness.act(StopOrder(task_id=1, attempt=0, grace_period=1))
