"""`corral worker` and `corral up` refuse capacities no machine has, with one line, before starting anything."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from corral.cli.main import main

UNREACHABLE = "http://127.0.0.1:9"  # nothing is started: the flags are refused first


@pytest.mark.parametrize(("flag", "value"), [
    ("--gpus", "2000000"), ("--gpus", "1566690764"), ("--cpus", "1e9"), ("--cpus", "nan"), ("--cpus", "inf"),
    ("--cpus", "0"), ("--memory", "1000T"), ("--resource", "tpu=nan"), ("--resource", "tpu=1e12"),
])
def test_a_worker_capacity_no_machine_has_is_one_line_of_error(flag, value):
    result = CliRunner().invoke(main, ["worker", "--controller", UNREACHABLE, flag, value],
                                env={"CORRAL_JOIN_TOKEN": "t"})
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and flag in errors[0], result.output


@pytest.mark.parametrize(("flag", "value"), [("--worker-gpus", "2000000"), ("--worker-cpus", "nan"),
                                             ("--worker-memory", "1000T")])
def test_up_refuses_them_too(flag, value, tmp_path):
    result = CliRunner().invoke(main, ["up", "--data-dir", str(tmp_path), flag, value])
    assert result.exit_code == 2, result.output
    assert flag in result.output


def test_shared_fs_directories_reach_the_worker_absolute(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr("corral.worker.agent.run_worker", started.append)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nfs").mkdir()
    result = CliRunner().invoke(main, ["worker", "--controller", UNREACHABLE, "--shared-fs", "nfs",
                                       "--shared-fs", str(tmp_path)], env={"CORRAL_JOIN_TOKEN": "t"})
    assert result.exit_code == 0, result.output
    assert started[0].shared_fs == [str(tmp_path / "nfs"), str(tmp_path)]


@pytest.mark.parametrize("name", ["missing", "file"])
def test_a_shared_fs_that_is_not_a_directory_is_one_line_of_error(tmp_path, name):
    (tmp_path / "file").write_text("x")
    result = CliRunner().invoke(main, ["worker", "--controller", UNREACHABLE, "--shared-fs", str(tmp_path / name)],
                                env={"CORRAL_JOIN_TOKEN": "t"})
    assert result.exit_code == 2 and "--shared-fs" in result.output, result.output
