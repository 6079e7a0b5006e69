import json
import time

import pytest
from pydantic import ValidationError

from corral.cli.common import CliError
from corral.cli.submit import build_spec, load_spec_file
from corral.client.errors import CorralError
from corral.core.spec import Workdir
from corral.core.views import WorkdirSharing
from corral.filesystem import filesystem_id


def test_options_build_the_spec():
    spec = build_spec(command=("python", "train.py"), cpus=2.5, memory="4G", gpus=1, replicas=4, gang=True,
                      time_limit="2h", grace_period="30s", env={"A": "1"}, labels={"team": "ml"})
    assert spec.command == ["python", "train.py"]
    assert (spec.resources.cpu, spec.resources.memory, spec.resources.gpu) == (2.5, 4 * 10**9, 1)
    assert (spec.replicas, spec.gang, spec.time_limit, spec.grace_period) == (4, True, 7200.0, 30.0)
    assert (spec.env, spec.labels, spec.name) == ({"A": "1"}, {"team": "ml"}, "python")


def test_options_override_the_file_and_the_rest_of_the_file_stays(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(
        "name: from-file\ncommand: python run.py --epochs 3\nreplicas: 2\n"
        "resources: {cpu: 4, memory: 8G, gpu: 2}\nenv: {PORT: 8080, MODE: fast}\nworkdir: src\n")
    data, workdir = load_spec_file(path)
    spec = build_spec(data, cpus=1.0, replicas=None, env={"MODE": "slow"}, name="cli")
    assert spec.name == "cli"
    assert spec.command == ["python", "run.py", "--epochs", "3"]
    assert spec.replicas == 2
    assert (spec.resources.cpu, spec.resources.memory, spec.resources.gpu) == (1.0, 8 * 10**9, 2)
    assert spec.env == {"PORT": "8080", "MODE": "slow"}
    assert workdir == tmp_path / "src"


def test_the_command_line_command_replaces_the_files(tmp_path):
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"command": ["a"], "priority": 5}))
    spec = build_spec(load_spec_file(path)[0], command=("b", "c"))
    assert (spec.command, spec.priority) == (["b", "c"], 5)


def test_a_bad_value_names_its_field():
    with pytest.raises(ValidationError) as raised:
        build_spec(command=("x",), memory="lots")
    assert raised.value.errors()[0]["loc"] == ("resources", "memory")


def test_submit_prints_only_the_job_id(cli, fake):
    result = cli("submit", "--cpus", "2", "--env", "A=b=c", "--label", "k=v", "--idempotency-key", "K",
                 "--", "python", "-c", "print(1)")
    assert result.exit_code == 0, result.output
    assert result.output == "42\n"
    spec, key = fake.submitted[0]
    assert spec.command == ["python", "-c", "print(1)"]
    assert (spec.resources.cpu, spec.env, spec.labels, key) == (2.0, {"A": "b=c"}, {"k": "v"}, "K")


def test_gpu_memory_from_the_option_or_the_file_and_refused_without_gpus(cli, fake, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("command: [train]\nresources: {gpu: 2, gpu_memory: 24Gi}\n")
    assert cli("submit", "-f", str(path), "--gpu-memory", "40G").exit_code == 0
    assert cli("submit", "-f", str(path)).exit_code == 0
    assert [spec.resources.gpu_memory for spec, _ in fake.submitted] == [40 * 10**9, 24 * 2**30]
    result = cli("submit", "--gpu-memory", "40G", "--", "train")
    assert result.exit_code == 1 and "ask for a gpu" in result.output


@pytest.mark.parametrize(("value", "kept"), [("0.25", 0.25), ("0.5", 0.5), ("0.01", 0.01), ("2", 2), ("1.0", 1)])
def test_gpus_are_whole_devices_or_a_share_of_one(cli, fake, value, kept):
    assert cli("submit", "--gpus", value, "--", "train").exit_code == 0
    gpu = fake.submitted[0][0].resources.gpu
    assert gpu == kept and type(gpu) is type(kept)


@pytest.mark.parametrize(("value", "says"), [
    ("0.333", "in hundredths"), ("1.5", "a share of one device from 0.01 to 0.99"), ("half", "not a number of GPUs"),
    ("0.001", "from 0.01 to 0.99"),
])
def test_gpus_neither_whole_nor_a_share_are_a_usage_error_naming_the_rule(cli, fake, value, says):
    result = cli("submit", "--gpus", value, "--", "train")
    assert result.exit_code == 2 and "Invalid value for '--gpus'" in result.output and says in result.output
    assert "Traceback" not in result.output and not fake.submitted


def test_a_spec_file_may_ask_for_a_share_and_a_bad_one_is_an_error_line(cli, fake, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("command: [serve]\nresources: {gpu: 0.25, gpu_memory: 10G}\n")
    assert cli("submit", "-f", str(path)).exit_code == 0
    assert (fake.submitted[0][0].resources.gpu, fake.submitted[0][0].resources.gpu_memory) == (0.25, 10 * 10**9)
    path.write_text("command: [serve]\nresources: {gpu: 0.333}\n")
    result = cli("submit", "-f", str(path))
    assert result.exit_code == 1 and result.output.startswith("error: invalid job spec: resources.gpu")
    assert "in hundredths" in result.output and len(fake.submitted) == 1


def test_submit_help_says_what_gpus_may_be(cli):
    assert "whole GPUs, or a share of one (0.01-0.99)" in " ".join(cli("submit", "--help").output.split())


def test_submit_json_prints_the_job_view(cli):
    result = cli("submit", "--json", "--", "true")
    assert json.loads(result.output)["id"] == 42


def test_an_env_option_without_equals_is_a_usage_error(cli, fake):
    result = cli("submit", "--env", "NOEQUALS", "--", "true")
    assert result.exit_code == 2
    assert "NOEQUALS" in result.output and not fake.submitted


def test_a_bad_spec_is_an_error_naming_the_field(cli, fake):
    result = cli("submit", "--memory", "lots", "--", "true")
    assert result.exit_code == 1
    assert result.output.startswith("error: ") and "resources.memory" in result.output
    assert not fake.submitted


@pytest.mark.parametrize(("option", "value", "field"), [
    ("--cpus", "0", "resources.cpu"), ("--cpus", "-1", "resources.cpu"), ("--memory", "-1G", "resources.memory"),
    ("--gpus", "-1", "resources.gpu"), ("--replicas", "0", "replicas"), ("--time-limit", "0", "time_limit"),
])
def test_zero_or_negative_amounts_are_refused_naming_the_field(cli, fake, option, value, field):
    result = cli("submit", option, value, "--", "true")
    assert result.exit_code == 1 and result.output.startswith(f"error: invalid job spec: {field}")
    assert len(result.output.strip().splitlines()) == 1 and not fake.submitted


def test_no_command_is_a_usage_error(cli):
    assert cli("submit", "--cpus", "1").exit_code == 2


def test_tasks_start_in_the_current_directory_and_nothing_is_uploaded_when_every_worker_shares_it(
        cli, fake, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli("submit", "--pool", "gpu", "--", "true")
    assert result.exit_code == 0, result.output
    spec = fake.submitted[0][0]
    assert spec.workdir == Workdir(path=str(tmp_path), filesystem=filesystem_id()) and spec.bundle is None
    assert fake.uploaded == [] and fake.asked_sharing == [(spec.workdir, "gpu")]
    assert fake.questions == 0  # asked as the submission's condition: one round trip


def test_a_conflict_other_than_the_files_is_an_error_line_and_nothing_is_uploaded(cli, fake, tmp_path, monkeypatch):
    def taken(spec, key=None):
        raise CorralError(409, "idempotency key k was used for another spec", "idempotency key k was used ...")

    monkeypatch.setattr(fake, "submit", taken)
    result = cli("submit", "--idempotency-key", "k", "--workdir", str(tmp_path), "--", "true")
    assert result.exit_code == 1 and "idempotency key k was used for another spec" in result.output
    assert fake.uploaded == []


@pytest.mark.parametrize("sharing", [WorkdirSharing(alive=3, sharing=2), WorkdirSharing(alive=0, sharing=0)])
def test_the_files_are_uploaded_when_a_worker_may_not_share_them(cli, fake, tmp_path, sharing):
    fake.sharing = sharing
    result = cli("submit", "--workdir", str(tmp_path / "."), "--", "true")
    assert result.exit_code == 0, result.output
    assert fake.uploaded == [tmp_path / "."] and fake.questions == 0
    spec = fake.submitted[0][0]
    assert spec.bundle == "ab" * 32 and spec.workdir.path == str(tmp_path)


def test_each_directory_of_a_listed_file_is_asked_about_once(cli, fake, tmp_path):
    (tmp_path / "jobs.yaml").write_text("- {command: [a]}\n- {command: [b]}\n")
    result = cli("submit", "-f", str(tmp_path / "jobs.yaml"), "--workdir", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert fake.questions == 1 and fake.uploaded == [] and [s.workdir.path for s, _ in fake.submitted] == [
        str(tmp_path)] * 2


def test_a_spec_files_workdir_is_relative_to_the_file(cli, fake, tmp_path):
    (tmp_path / "proj" / "src").mkdir(parents=True)
    (tmp_path / "proj" / "job.yaml").write_text("command: [\"true\"]\nworkdir: src\n")
    result = cli("submit", "-f", str(tmp_path / "proj" / "job.yaml"))
    assert result.exit_code == 0, result.output
    assert fake.submitted[0][0].workdir.path == str(tmp_path / "proj" / "src")


def test_no_workdir_starts_tasks_in_an_empty_directory_without_asking(cli, fake):
    result = cli("submit", "--no-workdir", "--", "true")
    assert result.exit_code == 0, result.output
    spec = fake.submitted[0][0]
    assert spec.workdir is None and spec.bundle is None and fake.asked_sharing == [] and fake.uploaded == []


@pytest.mark.parametrize(("args", "says"), [
    (["--workdir", "{tmp}/missing"], "does not exist"),
    (["--workdir", "{tmp}/file"], "is a file"),
    (["--workdir", "{tmp}", "--no-workdir"], "--workdir and --no-workdir contradict each other"),
    (["-f", "{tmp}/bad.yaml"], "workdir {tmp}/nowhere (from the spec file) does not exist"),
])
def test_a_bad_workdir_is_one_clear_line_and_nothing_is_submitted(cli, fake, tmp_path, args, says):
    (tmp_path / "file").write_text("x")
    (tmp_path / "bad.yaml").write_text("command: [\"true\"]\nworkdir: nowhere\n")
    result = cli("submit", *[a.format(tmp=tmp_path) for a in args], "--", "true")
    assert result.exit_code in (1, 2) and says.format(tmp=tmp_path) in result.output
    assert not fake.submitted


@pytest.mark.parametrize(("final", "code"), [("SUCCEEDED", 0), ("FAILED", 1)])
def test_wait_exits_by_the_final_state(cli, fake, final, code):
    fake.final_state = final
    result = cli("submit", "--wait", "--", "true")
    assert result.exit_code == code
    assert result.stdout == "42\n"
    assert final in result.stderr


def test_scheduling_options_build_the_spec(cli, fake):
    result = cli("submit", "--pool", "a100", "--project", "vision", "--priority", "high", "--constraint", "gpu=h100",
                 "--constraint", "zone in a,b", "--resource", "tpu=4", "--spread", "--after", "3,4", "--after-any",
                 "5", "--scheduling-timeout", "30s", "--begin", "2030-01-01T00:00:00+00:00", "--", "train")
    assert result.exit_code == 0, result.output
    spec, _ = fake.submitted[0]
    assert (spec.pool, spec.project, spec.priority, spec.spread) == ("a100", "vision", 100, True)
    assert spec.constraints == ["gpu=h100", "zone in a,b"]
    assert spec.resources.custom == {"tpu": 4.0}
    assert (spec.after, spec.after_any, spec.scheduling_timeout) == ([3, 4], [5], 30.0)
    assert spec.begin == 1893456000.0


def test_a_relative_begin_time_is_from_now(cli, fake):
    before = time.time()
    assert cli("submit", "--begin", "+10m", "--", "x").exit_code == 0
    assert before + 600 <= fake.submitted[0][0].begin <= time.time() + 600


@pytest.mark.parametrize(("args", "message"), [
    (["--priority", "urgent"], "not a priority"),
    (["--priority", "5000"], "priority"),
    (["--constraint", "gpu~h100"], "not a constraint"),
    (["--resource", "tpu=lots"], "not a number"),
    (["--resource", "cpu=2"], "not a custom resource name"),
    (["--after", "x"], "not a comma-separated list of job ids"),
    (["--begin", "someday"], "not a time"),
    (["--pool", "bad pool"], "pool"),
])
def test_bad_scheduling_options_are_refused_naming_the_problem(cli, fake, args, message):
    result = cli("submit", *args, "--", "x")
    assert result.exit_code != 0 and message in result.output, result.output
    assert fake.submitted == []


def test_export_copies_the_named_variables_of_the_submitters_environment(cli, fake, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", "/data/hf")
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert cli("submit", "--export", "HF_HOME", "--export", "WANDB_MODE", "--", "true").exit_code == 0
    path = tmp_path / "job.yaml"
    path.write_text("command: [train]\nexport: [HF_HOME]\n")
    assert cli("submit", "-f", str(path)).exit_code == 0
    assert cli("submit", "-f", str(path), "--export", "NONE").exit_code == 0
    assert [spec.export for spec, _ in fake.submitted] == [
        {"HF_HOME": "/data/hf", "WANDB_MODE": "offline"}, {"HF_HOME": "/data/hf"}, {}]


def test_export_all_copies_all_but_corrals_own_variables(cli, fake, monkeypatch):
    monkeypatch.setenv("CORRAL_TOKEN", "the-submitters-token")
    monkeypatch.setenv("HF_HOME", "/data/hf")
    assert cli("submit", "--export", "ALL", "--", "true").exit_code == 0
    exported = fake.submitted[0][0].export
    assert exported["HF_HOME"] == "/data/hf" and not any(name.startswith("CORRAL_") for name in exported)


@pytest.mark.parametrize(("value", "message"), [
    ("HF_HOME=/x", "error: --export HF_HOME=/x: give names only; set a value with --env HF_HOME=/x"),
    ("NOT_SET_HERE", "error: --export NOT_SET_HERE: not set in this environment"),
    ("CORRAL_TOKEN", "error: --export CORRAL_TOKEN: CORRAL_* variables are corral's own; each task gets its own"),
])
def test_a_bad_export_is_one_error_line_and_nothing_is_submitted(cli, fake, monkeypatch, value, message):
    monkeypatch.delenv("NOT_SET_HERE", raising=False)
    result = cli("submit", "--export", value, "--", "true")
    assert (result.exit_code, result.output.strip()) == (1, message)
    assert fake.submitted == []


def test_pip_and_python_options_replace_the_file_s(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("command: [python, train.py]\npip: [numpy, ./wheels/x-1.0-py3-none-any.whl]\npython: 3.11\n")
    data, _ = load_spec_file(path)
    spec = build_spec(data)
    assert (spec.pip, spec.python) == (["numpy", "./wheels/x-1.0-py3-none-any.whl"], "3.11")
    spec = build_spec(data, pip=("torch>=2", "-r requirements.txt"), python="3.12.1")
    assert (spec.pip, spec.python) == (["torch>=2", "-r requirements.txt"], "3.12.1")


def test_a_python_version_yaml_reads_as_a_shorter_number_is_refused_asking_for_quotes(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text('command: ["true"]\npython: 3.10\n')
    with pytest.raises(CliError, match="quote the version"):
        load_spec_file(path)
    path.write_text('command: ["true"]\npython: "3.10"\n')
    assert build_spec(load_spec_file(path)[0]).python == "3.10"
