"""corral-enter, the program a task's processes enter their cgroup by where the worker could build it: what the
started program sees and how a start that cannot run ends are what the shell it replaces gave."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from corral.worker import entering
from corral.worker import runner as runner_module
from corral.worker.containment import cgroup_parent

SHELL = ["/bin/sh", "-c", 'echo 0 > "$0/cgroup.procs" && exec "$@"']
needs_cgroups = pytest.mark.skipif(cgroup_parent() is None, reason="no writable cgroup v2 hierarchy on this machine")
needs_dash = pytest.mark.skipif(Path("/bin/sh").resolve().name != "dash", reason="its model is Debian's shell, dash")


@pytest.fixture(scope="module")
def enter(tmp_path_factory) -> str:
    parent = cgroup_parent()
    assert parent is not None
    program = entering.enter_program(parent, tmp_path_factory.mktemp("cache"))
    if program is None:
        pytest.skip("corral-enter cannot be built here (no C compiler, or neither x86-64 nor aarch64)")
    return program


def started(argv_start: list[str], command: list[str], cwd: Path, env: dict[str, str]) -> tuple:
    """Run `command` through `argv_start` into a fresh cgroup: its exit code, its output's lines sorted (an
    environment's order is the shell's own), whether it said anything on stderr, and the cgroup it ran in."""
    parent = cgroup_parent()
    assert parent is not None
    cgroup = parent / f"corral-test-{os.getpid()}-entering"
    cgroup.mkdir()
    try:
        done = subprocess.run([*argv_start, str(cgroup), *command], cwd=cwd, env=env, capture_output=True,
                              start_new_session=True, timeout=30)
    finally:
        cgroup.rmdir()
    lines = done.stdout.decode().replace(cgroup.name, "<cgroup>").replace(f"PPID={os.getpid()}", "PPID=<parent>")
    return done.returncode, sorted(lines.splitlines()), bool(done.stderr)


@needs_cgroups
@needs_dash
def test_a_start_through_corral_enter_sees_what_one_through_the_shell_saw(enter, tmp_path):
    bins, work = tmp_path / "bin", tmp_path / "work"
    bins.mkdir()
    work.mkdir()
    (tmp_path / "link").symlink_to(work)
    (bins / "plain").write_text('echo "plain $0 $1 $PWD"\ncat /proc/self/cgroup\n')  # no #!: run by /bin/sh
    (bins / "plain").chmod(0o755)
    (bins / "closed").write_text("#!/bin/sh\n")
    path = f"{tmp_path}/none:{bins}%func:{bins}:/usr/bin:/bin"
    show = ["sh", "-c", 'env; pwd; cat /proc/self/cgroup; echo "$0 $*"', "zero", "one", "two"]
    cases = [
        (show, work, {"PATH": path}),
        (show, tmp_path / "link", {"PATH": path, "PWD": str(tmp_path / "link")}),
        (show, tmp_path / "link", {"PATH": path, "PWD": str(tmp_path)}),
        (show, work, {"PATH": path, "PWD": "relative", "IFS": ":", "OPTIND": " 7 ", "PPID": "1", "A.B": "1",
                      "C-D": "2", "É": "3", "_ok": "4"}),
        (["plain", "x"], work, {"PATH": path}),
        ([str(bins / "plain")], work, {}),
        (["env"], work, {}),  # no PATH: the shell's own
        (["absent"], work, {"PATH": path}),
        (["closed"], work, {"PATH": path}),
        ([str(bins / "closed")], work, {"PATH": path}),
        ([str(bins / "plain" / "x")], work, {"PATH": path}),
        (["true"], work, {"PATH": path, "OPTIND": "x"}),
        (["true"], work, {"PATH": path, "OPTIND": "2147483648"}),
        (["sh", "-c", "exit 3"], work, {"PATH": path, "OPTIND": "-0"}),
    ]
    for command, cwd, env in cases:
        assert started([enter], command, cwd, env) == started(SHELL, command, cwd, env), (command, cwd, env)


@needs_cgroups
def test_the_worker_starts_a_task_in_its_cgroup_through_corral_enter_where_built(enter, tmp_path):
    cgroup = tmp_path / "cg"
    argv = runner_module._launch(["true"], tmp_path, {"PATH": os.defpath}, tmp_path / "record", cgroup, enter=enter)
    assert argv == [enter, str(cgroup), "true"]
    assert runner_module._launch(["true"], tmp_path, {"PATH": os.defpath}, tmp_path / "record", cgroup)[:3] == SHELL


def test_without_a_compiler_or_where_its_try_fails_tasks_enter_by_the_shell(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name, *args, **kwargs: None)
    assert entering.enter_program(tmp_path, tmp_path / "cache") is None
    monkeypatch.undo()
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler")
    assert entering.enter_program(tmp_path / "not-a-cgroup", tmp_path / "cache") is None  # built, its try fails
