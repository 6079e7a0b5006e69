"""The runner on real processes: outcomes, logs, time limits, stops, process groups, idempotence."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time

import pytest

import corral.worker.runner as runner_module
from corral.core.attempt_world import AttemptWorld
from corral.core.log_limits import truncation_marker
from corral.core.protocol import RelayOrder, StartOrder, StopOrder
from corral.core.spec import Workdir
from tests.waiting import wait_until
from tests.worker.support import CONTAINMENTS, Harness, build_order, daemonizing_task, gone, written_pids

PY = sys.executable


@pytest.fixture(params=CONTAINMENTS)
def harness(tmp_path, request):
    return Harness(tmp_path, containment=request.param)


async def run_to_end(harness: Harness, command: list[str], **fields):
    await harness.act(build_order(command, **fields))
    await harness.act(StartOrder(task_id=1, attempt=0))
    return await harness.ended()


def pids_in(path) -> list[int] | None:
    """The pids a task wrote, once it has written both of them."""
    values = path.read_text().split() if path.exists() else []
    return [int(v) for v in values] if len(values) == 2 else None


async def test_exit_zero_succeeds_and_its_output_is_in_the_attempt_files(harness):
    report = await run_to_end(harness, ["sh", "-c", "echo out; echo err >&2"])
    assert harness.states() == ["BUILDING", "PREPARED", "RUNNING", "SUCCEEDED"]
    assert (report.exit_code, report.reason) == (0, None)
    assert (harness.attempt_dir() / "stdout").read_text() == "out\n"
    assert (harness.attempt_dir() / "stderr").read_text() == "err\n"
    assert harness.flushed == [(1, 0, 3)]  # logs flushed after RUNNING, before the terminal report


async def test_output_past_the_log_limit_is_dropped_after_a_marker_and_the_task_still_succeeds(harness):
    harness.runner.log_limit = 10_000
    script = "import sys\nfor _ in range(2000): print('x' * 99)\nsys.stderr.write('short')"
    report = await run_to_end(harness, [PY, "-c", script])
    assert report.state == "SUCCEEDED"
    stdout = (harness.attempt_dir() / "stdout").read_bytes()
    assert stdout == (b"x" * 99 + b"\n") * 100 + truncation_marker(10_000)
    assert b"[corral: log truncated at 10.0K; further output dropped]" in stdout
    assert (harness.attempt_dir() / "stderr").read_bytes() == b"short"


async def test_output_of_exactly_the_limit_is_kept_whole_without_a_marker(harness):
    harness.runner.log_limit = 100
    await run_to_end(harness, [PY, "-c", "print('y' * 99)"])
    assert (harness.attempt_dir() / "stdout").read_bytes() == b"y" * 99 + b"\n"


async def test_non_zero_exit_fails_with_its_exit_code(harness):
    report = await run_to_end(harness, ["sh", "-c", "echo bad >&2; exit 3"])
    assert (report.state, report.exit_code, report.reason) == ("FAILED", 3, "exit code 3")
    assert (harness.attempt_dir() / "stderr").read_text() == "bad\n"


async def test_a_death_by_signal_is_128_plus_the_signal(harness):
    report = await run_to_end(harness, ["sh", "-c", "kill -9 $$"])
    assert (report.state, report.exit_code, report.reason) == ("FAILED", 137, "killed by signal SIGKILL")


async def test_a_command_not_found_fails_with_127_and_never_runs(harness):
    report = await run_to_end(harness, ["corral-no-such-command"])
    assert harness.states() == ["BUILDING", "PREPARED", "FAILED"]
    assert report.exit_code == 127 and "corral-no-such-command" in report.reason


async def test_the_time_limit_kills_the_whole_process_group(harness):
    pids = harness.work_dir / "pids"
    script = f"sleep 100 & echo $! > {pids}; echo $$ >> {pids}; wait"
    await harness.act(build_order(["sh", "-c", script], time_limit=0.5, grace_period=5))
    await harness.act(StartOrder(task_id=1, attempt=0))
    grandchild, child = await wait_until(lambda: pids_in(pids), what="the task to write its pids")
    report = await harness.ended()
    assert (report.state, report.reason) == ("KILLED", "time limit")
    assert gone(child) and gone(grandchild)


async def test_a_stop_kills_a_group_that_ignores_sigterm_after_the_grace_period(harness):
    pids = harness.work_dir / "pids"
    script = f"trap '' TERM; sleep 100 & echo $! > {pids}; echo $$ >> {pids}; wait"
    await harness.act(build_order(["sh", "-c", script]))
    await harness.act(StartOrder(task_id=1, attempt=0))
    grandchild, child = await wait_until(lambda: pids_in(pids), what="the task to write its pids")
    began = time.monotonic()
    stop = StopOrder(task_id=1, attempt=0, grace_period=0.5, reason="cancelled")
    await harness.act(stop)
    report = harness.last()
    assert (report.state, report.reason) == ("KILLED", "cancelled")
    assert time.monotonic() - began >= 0.5  # SIGTERM was ignored: only SIGKILL after the grace ended it
    assert gone(child) and gone(grandchild)


async def test_a_stop_does_not_wait_out_the_grace_period_of_a_task_that_obeys_sigterm(harness):
    await harness.act(build_order(["sleep", "100"]))
    await harness.act(StartOrder(task_id=1, attempt=0))
    began = time.monotonic()
    stop = StopOrder(task_id=1, attempt=0, grace_period=30, reason="job is ending")
    await harness.act(stop)
    assert time.monotonic() - began < 5
    report = harness.last()
    assert (report.state, report.exit_code, report.reason) == ("KILLED", 143, "job is ending")


async def test_a_task_that_exited_on_its_own_keeps_its_outcome_when_the_stop_comes_late(harness):
    await run_to_end(harness, ["sh", "-c", "exit 4"])
    await harness.act(StopOrder(task_id=1, attempt=0, grace_period=1))
    assert harness.states() == ["BUILDING", "PREPARED", "RUNNING", "FAILED"]


async def test_repeated_orders_are_acted_on_once(harness):
    count = harness.work_dir / "count"
    order = build_order(["sh", "-c", f"echo run >> {count}"])
    assert harness.runner.submit(order) and not harness.runner.submit(order)
    await wait_until(lambda: "PREPARED" in harness.states(), what="the build")
    start = StartOrder(task_id=1, attempt=0)
    assert harness.runner.submit(start) and not harness.runner.submit(start)
    await harness.ended()
    for repeat in (order, start, start):
        assert not harness.runner.submit(repeat)
    await harness.act(StopOrder(task_id=1, attempt=0))
    assert not harness.runner.submit(StopOrder(task_id=1, attempt=0))
    assert harness.states() == ["BUILDING", "PREPARED", "RUNNING", "SUCCEEDED"]
    assert count.read_text() == "run\n"


async def test_the_attempts_held_are_every_build_taken_until_forgotten_and_no_build_given_for_one_is_acted_on(harness):
    """A heartbeat says which builds the worker holds, so that the controller gives them no more. A build counts from
    the moment it is taken, before its task's first turn (the heartbeat after the reply that brought it is often made
    in the same turn), and an attempt stays held after its end, until the controller has it (Runner.forget): both
    times a build given again would be a repeat. Which is all `holding` says: one given anyway is not acted on."""
    assert harness.runner.submit(build_order(["true"], start=True))
    assert harness.runner.holding() == [(1, 0)] and harness.runner.running() == []
    await harness.ended()
    assert harness.runner.holding() == [(1, 0)] and harness.runner.running() == []
    for held in harness.runner.holding():
        assert not harness.runner.submit(build_order(["true"], task_id=held[0], attempt=held[1]))
    harness.runner.forget([(1, 0)])
    assert harness.runner.holding() == []
    await harness.act(StopOrder(task_id=7, attempt=2))  # ended here before its build came: no build taken
    await harness.act(RelayOrder(session="s" * 16, task_id=8, attempt=0, kind="exec", command=["true"]))
    assert harness.runner.holding() == []


async def test_a_start_before_its_build_is_ignored_and_counts_once_built(harness):
    start = StartOrder(task_id=1, attempt=0)
    assert not harness.runner.submit(start)
    await harness.act(build_order(["true"]))
    assert harness.runner.submit(start)
    assert (await harness.ended()).state == "SUCCEEDED"


async def test_a_stop_of_an_attempt_never_built_here_is_killed_at_once_and_never_built(harness):
    await harness.act(StopOrder(task_id=7, attempt=2, reason="cancelled"))
    report = harness.last(7, 2)
    assert (report.state, report.reason) == ("KILLED", "cancelled")
    await harness.act(build_order(["true"], task_id=7, attempt=2))
    assert harness.states(7, 2) == ["KILLED"]
    assert not harness.attempt_dir(7, 2).exists()


async def test_a_stop_of_a_prepared_attempt_kills_it_without_a_process(harness):
    await harness.act(build_order(["true"]))
    await harness.act(StopOrder(task_id=1, attempt=0, reason="cancelled"))
    assert not harness.runner.submit(StartOrder(task_id=1, attempt=0))  # the attempt is gone: nothing to start
    assert harness.states() == ["BUILDING", "PREPARED", "KILLED"]
    assert not (harness.attempt_dir() / "stdout").exists()


def make_bundle(path, files: dict[str, bytes]):
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


async def test_a_build_with_a_bundle_unpacks_it_and_the_task_runs_inside(tmp_path):
    bundle = make_bundle(tmp_path / "b.tar.gz", {"data/hello.txt": b"hello from the bundle\n"})
    harness = Harness(tmp_path / "worker", bundles={"a" * 64: bundle})
    report = await run_to_end(harness, ["cat", "data/hello.txt"], bundle="a" * 64)
    assert report.state == "SUCCEEDED"
    assert (harness.attempt_dir() / "stdout").read_text() == "hello from the bundle\n"
    assert (harness.attempt_dir() / "work" / "data" / "hello.txt").exists()


HERE, ELSEWHERE = "a" * 32, "b" * 32


async def test_a_worker_that_shares_the_workdir_runs_the_task_in_it_and_reports_so(tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    harness = Harness(tmp_path / "worker", filesystem=HERE)
    workdir = Workdir(path=str(project), filesystem=HERE)
    report = await run_to_end(harness, ["sh", "-c", "pwd; echo made > out.txt"], workdir=workdir, bundle="a" * 64)
    assert report.state == "SUCCEEDED"
    assert (project / "out.txt").read_text() == "made\n"
    assert (harness.attempt_dir() / "stdout").read_text() == f"{project}\n"
    prepared = next(r for r in harness.reports if r.state == "PREPARED")
    assert prepared.world == AttemptWorld(start="shared", directory=str(project))


async def test_a_worker_under_a_shared_fs_runs_in_place(tmp_path):
    project = tmp_path / "nfs" / "proj"
    project.mkdir(parents=True)
    harness = Harness(tmp_path / "worker", filesystem=ELSEWHERE, shared_fs=(str(tmp_path / "nfs"),))
    report = await run_to_end(harness, ["pwd"], workdir=Workdir(path=str(project), filesystem=HERE))
    assert report.state == "SUCCEEDED" and (harness.attempt_dir() / "stdout").read_text() == f"{project}\n"


async def test_a_worker_elsewhere_runs_in_a_copy_of_the_bundle_and_reports_so(tmp_path):
    bundle = make_bundle(tmp_path / "b.tar.gz", {"hello.txt": b"copied\n"})
    harness = Harness(tmp_path / "worker", bundles={"a" * 64: bundle}, filesystem=ELSEWHERE)
    workdir = Workdir(path=str(tmp_path), filesystem=HERE)
    report = await run_to_end(harness, ["cat", "hello.txt"], workdir=workdir, bundle="a" * 64)
    assert report.state == "SUCCEEDED" and (harness.attempt_dir() / "stdout").read_text() == "copied\n"
    prepared = next(r for r in harness.reports if r.state == "PREPARED")
    assert prepared.world == AttemptWorld(start="bundle", directory=str(harness.attempt_dir() / "work"))


async def test_without_workdir_or_bundle_the_task_starts_in_its_empty_directory(tmp_path):
    harness = Harness(tmp_path / "worker", filesystem=HERE)
    report = await run_to_end(harness, ["sh", "-c", "ls -A | grep -v -e stdout -e stderr -e shim || true"])
    assert report.state == "SUCCEEDED"
    prepared = next(r for r in harness.reports if r.state == "PREPARED")
    assert prepared.world == AttemptWorld(start="empty", directory=str(harness.attempt_dir()))


async def test_a_worker_that_can_neither_share_nor_copy_fails_the_build_saying_why(tmp_path):
    harness = Harness(tmp_path / "worker", filesystem=ELSEWHERE)
    await harness.act(build_order(["true"], workdir=Workdir(path="/home/a/proj", filesystem=HERE)))
    assert harness.states() == ["BUILDING", "FAILED"]
    assert harness.last().reason == ("build failed: this worker does not share the file system of /home/a/proj, "
                                      "and the job's files were not uploaded")


async def test_a_bundle_with_a_path_outside_fails_the_build(tmp_path):
    bundle = make_bundle(tmp_path / "b.tar.gz", {"ok.txt": b"fine", "../x": b"escaped"})
    harness = Harness(tmp_path / "worker", bundles={"b" * 64: bundle})
    await harness.act(build_order(["true"], bundle="b" * 64))
    report = harness.last()
    assert harness.states() == ["BUILDING", "FAILED"]
    assert report.reason.startswith("build failed: ") and "../x" in report.reason
    assert not (harness.attempt_dir() / "x").exists() and not (harness.attempt_dir() / "work" / "ok.txt").exists()


async def test_a_bundle_that_cannot_be_fetched_fails_the_build(tmp_path):
    harness = Harness(tmp_path)
    await harness.act(build_order(["true"], bundle="c" * 64))
    assert harness.states() == ["BUILDING", "FAILED"]
    assert harness.last().reason.startswith("build failed: ")


async def test_the_attempt_directory_is_made_while_the_loop_goes_on(tmp_path, monkeypatch):
    """A mkdir waiting on a busy disk's journal stalls nothing else: the loop runs while it waits."""
    loop, release = asyncio.get_running_loop(), threading.Event()
    waiting = asyncio.Event()
    make = runner_module._private_directory

    def slow(directory):
        loop.call_soon_threadsafe(waiting.set)
        assert release.wait(10), "the loop never ran while the directory was being made"
        make(directory)

    monkeypatch.setattr(runner_module, "_private_directory", slow)
    harness = Harness(tmp_path)
    acting = asyncio.create_task(harness.act(build_order(["true"])))
    async with asyncio.timeout(10):
        await waiting.wait()
    release.set()
    await acting
    assert harness.states() == ["BUILDING", "PREPARED"]
    assert harness.attempt_dir().stat().st_mode & 0o777 == 0o700


async def test_an_attempt_s_ended_captures_are_not_waited_for(tmp_path, monkeypatch):
    """Most captures end with their process (its exit closes their pipes): a wait on ended ones would cost every
    task's end a future, a timer and two turns of the loop."""
    harness = Harness(tmp_path)

    async def read_to_its_end() -> None:
        pass

    att = runner_module._Attempt(build_order(["true"]), tmp_path, asyncio.Lock())
    att.captures = [asyncio.create_task(read_to_its_end()) for _ in range(2)]
    await asyncio.wait(att.captures)
    monkeypatch.setattr(runner_module.asyncio, "wait", lambda *args, **kwargs: pytest.fail("waited for ended captures"))
    await harness.runner._captured(att)


@pytest.mark.skipif(runner_module.cgroup_parent() is None, reason="no writable cgroup v2 hierarchy on this machine")
async def test_a_task_s_cgroup_is_named_without_a_look_at_the_file_system(tmp_path, monkeypatch):
    harness = Harness(tmp_path, containment="cgroup")
    prefix = harness.runner.cgroup_prefix
    monkeypatch.setattr(runner_module.Path, "resolve", lambda self, strict=False: pytest.fail("resolved a path"))
    await run_to_end(harness, ["sh", "-c", "cat /proc/self/cgroup"])
    assert harness.states() == ["BUILDING", "PREPARED", "RUNNING", "SUCCEEDED"]
    assert f"/{prefix}1-0" in (harness.attempt_dir() / "stdout").read_text()


async def test_env_is_overlaid_and_cuda_visible_devices_comes_from_gpu_ids(tmp_path, monkeypatch):
    monkeypatch.setenv("CORRAL_TEST_INHERITED", "yes")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    script = 'echo "$CORRAL_TEST_INHERITED $FOO [${CUDA_VISIBLE_DEVICES-unset}]"'
    cases = [(2, [1, 0], "yes bar [1,0]\n"), (2, [], "yes bar []\n"), (0, [], "yes bar [unset]\n")]
    for index, (gpus, gpu_ids, expected) in enumerate(cases):
        harness = Harness(tmp_path / str(index), gpus=gpus)
        await run_to_end(harness, ["sh", "-c", script], env={"FOO": "bar"}, gpu_ids=gpu_ids)
        assert (harness.attempt_dir() / "stdout").read_text() == expected


async def test_a_task_with_a_share_sees_its_one_device_and_its_share_and_a_whole_one_no_share(tmp_path, monkeypatch):
    monkeypatch.delenv("CORRAL_GPU_SHARE", raising=False)
    script = 'echo "$CUDA_VISIBLE_DEVICES [${CORRAL_GPU_SHARE-unset}] [${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE-unset}]"'
    cases = [(False, [1], 0.25, "1 [0.25] [unset]\n"), (True, [1], 0.25, "1 [0.25] [25]\n"),
             (True, [0, 1], None, "0,1 [unset] [unset]\n")]
    for index, (mps, gpu_ids, share, expected) in enumerate(cases):
        harness = Harness(tmp_path / str(index), gpus=2, mps=mps)
        await run_to_end(harness, ["sh", "-c", script], gpu_ids=gpu_ids, gpu_share=share)
        assert (harness.attempt_dir() / "stdout").read_text() == expected


async def test_a_task_gets_its_job_s_token_and_never_the_worker_s(tmp_path, monkeypatch):
    monkeypatch.setenv("CORRAL_JOIN_TOKEN", "the-worker-s-join-token")
    monkeypatch.setenv("CORRAL_TOKEN", "the-worker-s-token")
    harness = Harness(tmp_path)
    await run_to_end(harness, ["sh", "-c", 'echo "[${CORRAL_JOIN_TOKEN-unset}] [${CORRAL_TOKEN-unset}]"'])
    assert (harness.attempt_dir() / "stdout").read_text() == "[unset] [unset]\n"
    harness = Harness(tmp_path / "job")
    await run_to_end(harness, ["sh", "-c", 'echo "[${CORRAL_TOKEN-unset}]"'], env={"CORRAL_TOKEN": "job-token"})
    assert (harness.attempt_dir() / "stdout").read_text() == "[job-token]\n"


async def test_shutdown_stops_every_attempt_without_reporting_them(harness):
    pids = harness.work_dir / "pids"
    await harness.act(build_order(["sh", "-c", f"sleep 100 & echo $! > {pids}; echo $$ >> {pids}; wait"]))
    await harness.act(StartOrder(task_id=1, attempt=0))
    await harness.act(build_order(["true"], task_id=2))
    grandchild, child = await wait_until(lambda: pids_in(pids), what="the task to write its pids")
    assert {(r.task_id, r.attempt) for r in harness.runner.running()} == {(1, 0), (2, 0)}
    await asyncio.wait_for(harness.runner.shutdown(), 10)
    assert harness.runner.running() == []
    assert gone(child) and gone(grandchild)
    assert harness.states(1) == ["BUILDING", "PREPARED", "RUNNING"] and harness.states(2) == ["BUILDING", "PREPARED"]


async def test_a_task_s_leftover_background_processes_die_with_it(harness):
    pids = harness.work_dir / "pids"
    report = await run_to_end(harness, ["sh", "-c", f"sleep 100 & echo $! > {pids}; echo $$ >> {pids}"])
    assert report.state == "SUCCEEDED"
    assert all(gone(pid) for pid in pids_in(pids))


WORKER = """
import asyncio, json, sys
from pathlib import Path
from corral.core.protocol import BuildOrder, StartOrder
from corral.worker.runner import Runner

async def main():
    async def nothing(*_):
        pass
    runner = Runner(Path(sys.argv[1]), report=print, fetch_bundle=nothing, flush_logs=nothing,
                    watch_logs=lambda *_: None, containment=sys.argv[3])
    await runner.submit(BuildOrder(task_id=1, attempt=0, job_id=1, task_index=0, env={},
                                  command=json.loads(sys.argv[2])))
    await runner.submit(StartOrder(task_id=1, attempt=0))
    await asyncio.Event().wait()

asyncio.run(main())
"""


@pytest.mark.parametrize("containment", CONTAINMENTS)
async def test_no_process_of_a_task_outlives_a_worker_killed_outright(tmp_path, containment):
    command, prefix = daemonizing_task(tmp_path, "task")
    worker = subprocess.Popen([PY, "-c", WORKER, str(tmp_path / "work"), json.dumps(command), containment],
                              start_new_session=True)
    pids = []
    try:
        pids = await wait_until(lambda: written_pids(prefix), 10, "the task and its daemon")
        assert not any(gone(pid) for pid in pids)
    finally:
        worker.kill()
        worker.wait()
    try:
        await wait_until(lambda: all(gone(pid) for pid in pids), what="the task and its daemon to die with the worker")
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_launch_runs_the_command_under_its_shim_or_in_its_cgroup_and_fails_early_for_a_missing_program(tmp_path):
    record = tmp_path / "processes.json"
    argv = runner_module._launch(["sh", "-c", "true"], tmp_path, {"PATH": os.defpath}, record, None)
    assert argv[-5:] == [str(record), "--", "sh", "-c", "true"] and "corral.worker.shim" in argv[-6]
    assert runner_module._launch(["sh", "-c", "true"], tmp_path, {"PATH": os.defpath}, record, tmp_path / "cg")[-4:] \
        == [str(tmp_path / "cg"), "sh", "-c", "true"]  # a cgroup contains it: no shim
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(PermissionError):
        runner_module._launch(["./script"], tmp_path, {}, record, None)
    with pytest.raises(FileNotFoundError):
        runner_module._launch(["./absent"], tmp_path, {}, record, None)


def test_a_program_found_on_path_before_is_looked_for_again_once_gone_or_not_executable(tmp_path, monkeypatch):
    monkeypatch.setattr(runner_module, "_FOUND", {})
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    path = f"{first}{os.pathsep}{second}"
    program = second / "tool"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    runner_module._check_executable("tool", tmp_path, path)
    program.chmod(0o644)
    with pytest.raises(FileNotFoundError):
        runner_module._check_executable("tool", tmp_path, path)
    (first / "tool").mkdir()  # a directory of its name is passed over, as exec passes it over
    with pytest.raises(FileNotFoundError):
        runner_module._check_executable("tool", tmp_path, path)
    program.chmod(0o755)
    runner_module._check_executable("tool", tmp_path, path)
    program.unlink()
    with pytest.raises(FileNotFoundError):
        runner_module._check_executable("tool", tmp_path, path)


async def test_starting_and_ending_say_when_a_report_follows_within_turns_of_the_loop(harness):
    """What the agent's reporter waits for (Agent._linger): an attempt to be started that starts once built with
    nothing to fetch, and an attempt whose process has exited and whose end is not yet reported."""
    flushing = asyncio.Event()

    async def flush(task_id: int, attempt: int) -> None:
        await flushing.wait()

    harness.runner._flush_logs = flush
    harness.runner.submit(build_order(["true"], start=True))
    await asyncio.sleep(0)  # the build's first turn
    assert harness.runner.starting() and not harness.runner.ending()
    await wait_until(harness.runner.ending, what="the exit to be reaped")
    assert not harness.runner.starting()
    flushing.set()
    await harness.ended()
    assert not harness.runner.ending() and not harness.runner.starting()
    harness.runner.submit(build_order(["true"], task_id=2))  # a gang's: it waits for its start order
    harness.runner.submit(build_order(["true"], task_id=3, start=True, pip=["nothing"]))  # builds an environment
    await asyncio.sleep(0)
    assert not harness.runner.starting()
