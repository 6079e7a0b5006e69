"""corral shell, attach, exec and port-forward up to the relay, and interactive jobs in `jobs` and `info`."""

from __future__ import annotations

import json
import time

from corral.cli.interactive import SHELL_SCRIPT, parse_port_spec
from corral.core.spec import JobSpec
from tests.cli.conftest import job_view


def test_shell_submits_an_interactive_job_running_the_users_shell(cli, fake, monkeypatch):
    monkeypatch.setenv("SHELL", "/usr/bin/zsh")
    fake.jobs = [job_view(42, state="FAILED", pending_reason="no worker has 64 GPUs")]
    result = cli("shell", "--cpus", "2", "--idle-timeout", "10m", "--no-workdir")
    spec, _ = fake.submitted[0]
    assert spec.interactive and spec.idle_timeout == 600 and spec.resources.cpu == 2
    assert spec.command == ["/bin/sh", "-c", SHELL_SCRIPT, "/usr/bin/zsh"]
    assert spec.max_retries_preemption == 0
    assert result.exit_code == 1
    assert "error: job 42 ended FAILED before its terminal opened: no worker has 64 GPUs" in result.output


def test_a_shell_whose_command_ended_before_the_attach_shows_its_output_and_exits_with_its_code(cli, fake):
    from corral.core.views import TaskView
    fake.jobs = [job_view(42, state="FAILED")]
    fake.task_views = [TaskView(id=1, index=0, state="FAILED", attempt=0, worker_id="w-1", gpu_ids=[], failures=1,
                                preemptions=0, exit_code=3, reason="exit code 3", state_since=time.time())]
    fake.log_chunks = [b"job=42\r\n"]
    result = cli("shell", "--no-workdir", "--", "sh", "-c", "echo job=$CORRAL_JOB_ID; exit 3")
    assert result.exit_code == 3 and "job=42" in result.output and "error" not in result.output


def test_shell_runs_the_command_given_and_refuses_a_command_with_jupyter(cli, fake):
    fake.jobs = [job_view(42, state="CANCELLED")]
    cli("shell", "--no-workdir", "--", "python", "-i")
    assert fake.submitted[0][0].command == ["python", "-i"]
    result = cli("shell", "--jupyter", "--no-workdir", "--", "bash")
    assert result.exit_code == 2 and "--jupyter runs JupyterLab" in result.output


def test_jupyter_asks_for_a_port_and_passes_a_token(cli, fake):
    fake.jobs = [job_view(42, state="CANCELLED")]
    cli("shell", "--jupyter", "--pip", "jupyterlab", "--no-workdir")
    spec = fake.submitted[0][0]
    assert spec.allocate_port and len(spec.env["JUPYTER_TOKEN"]) >= 24 and "--ip=127.0.0.1" in spec.command[-1]


def test_shell_has_no_retry_options(cli):
    result = cli("shell", "--retry-max", "2", "--", "sh")
    assert result.exit_code == 2 and "No such option '--retry-max'" in result.output


def test_port_specs():
    assert parse_port_spec(None, None, "8888") == (0, 8888)
    assert parse_port_spec(None, None, "9000:8888") == (9000, 8888)


def test_port_forward_fails_early_when_the_task_is_not_running(cli, fake):
    from corral.core.views import TaskView
    fake.task_views = [TaskView(id=1, index=0, state="PENDING", attempt=0, worker_id=None, gpu_ids=[], failures=0,
                                preemptions=0, exit_code=None, reason=None, state_since=time.time())]
    result = cli("port-forward", "5", "8888")
    assert result.exit_code == 1 and "error: job 5 task 0 is PENDING, not RUNNING" in result.output
    result = cli("port-forward", "5", "8888", "--task", "3")
    assert result.exit_code == 1 and "error: job 5 has no task 3 (it has 1)" in result.output


def test_jobs_marks_interactive_jobs(cli, fake):
    fake.jobs = [job_view(3, JobSpec(command=["sh"], interactive=True), state="RUNNING"), job_view(2)]
    lines = cli("jobs").output.splitlines()
    assert "interactive" in next(line for line in lines if line.startswith("3 "))
    assert "interactive" not in next(line for line in lines if line.startswith("2 "))


def test_info_lists_open_and_recent_attachments(cli, fake):
    now = time.time()
    fake.jobs = [job_view(9, JobSpec(command=["sh"], interactive=True), state="RUNNING")]
    fake.attachment_views = [
        {"id": 1, "job_id": 9, "task_index": 0, "attempt": 0, "worker_id": "w-1", "kind": "exec",
         "detail": {"command": ["nvidia-smi"]}, "actor": "admin", "address": "10.0.0.5", "state": "closed",
         "opened_at": now - 60, "connected_at": now - 59, "closed_at": now - 58, "close_code": 1000,
         "close_reason": None},
        {"id": 2, "job_id": 9, "task_index": 0, "attempt": 0, "worker_id": "w-1", "kind": "terminal",
         "detail": {"watch": False}, "actor": "admin", "address": "10.0.0.6", "state": "open",
         "opened_at": now - 30, "connected_at": now - 29, "closed_at": None, "close_code": None,
         "close_reason": None},
    ]
    result = cli("info", "9")
    assert result.exit_code == 0, result.output
    section = result.output[result.output.index("attachments"):]
    assert section.index("10.0.0.6") < section.index("nvidia-smi")  # open ones first
    assert "idle timeout 1h" in result.output and "corral attach 9" in result.output
    assert json.loads(cli("info", "9", "--json").output)["attachments"][0]["id"] == 1


def test_exec_takes_its_options_after_the_job_and_the_command_after_the_separator(cli, fake, monkeypatch):
    """`corral exec 5 -T -- nvidia-smi --query-gpu=name` (as kubectl exec): -T is exec's, the rest the command's."""
    from corral.client.relay import TerminalOutcome

    asked: list = []

    class Relay:
        def exec(self, job_id, command, task, **options):
            asked.append((job_id, list(command), task, options))

    fake.relay = Relay()
    monkeypatch.setattr("corral.cli.interactive.run_local_terminal", lambda *_, **__: TerminalOutcome(code=4))
    result = cli("exec", "5", "-T", "--task", "1", "--", "nvidia-smi", "--query-gpu=name", "-i", "0")
    assert result.exit_code == 4
    assert asked == [(5, ["nvidia-smi", "--query-gpu=name", "-i", "0"], 1,
                      {"tty": False, "detach": False, "size": None})]
    result = cli("exec", "5", "ls", "-la")
    assert result.exit_code == 2 and "No such option" in result.output
