"""`corral controller`, `worker` and `router` options: tokens never on the command line, /metrics access."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from corral.cli.main import main


@pytest.fixture
def started(monkeypatch):
    """What the long-running command would have run with, instead of running it."""
    calls: dict = {}
    monkeypatch.setattr("corral.worker.agent.run_worker", lambda options: calls.update(worker=options))
    monkeypatch.setattr("corral.controller.server.serve", lambda settings: calls.update(controller=settings))
    monkeypatch.setattr("corral.serving.standalone.run_router", lambda url, token, *_: calls.update(router=token))
    return calls


WORKER = ["worker", "--controller", "http://127.0.0.1:1", "--name", "w"]
ROUTER = ["router", "--controller", "http://127.0.0.1:1"]


@pytest.mark.parametrize("args", [WORKER, ROUTER])
def test_a_token_on_the_command_line_is_refused(started, args):
    result = CliRunner().invoke(main, [*args, "--token", "secret"], env={"CORRAL_TOKEN": "t"})
    assert result.exit_code == 2 and "visible to every user" in result.output and "--token-file" in result.output
    assert started == {}


def test_the_worker_reads_its_token_from_a_file_stdin_or_the_environment(started, tmp_path):
    token_file = tmp_path / "join"
    token_file.write_text("from-file\n")
    runner = CliRunner()
    cases = [([*WORKER, "--token-file", str(token_file)], None, {"CORRAL_JOIN_TOKEN": "env"}, "from-file"),
             ([*WORKER, "--token-file", "-"], "from-stdin\n", {}, "from-stdin"),
             (WORKER, None, {"CORRAL_JOIN_TOKEN": "join", "CORRAL_TOKEN": "admin"}, "join"),
             (WORKER, None, {"CORRAL_JOIN_TOKEN": None, "CORRAL_TOKEN": "admin"}, "admin")]
    for args, stdin, env, token in cases:
        result = runner.invoke(main, args, input=stdin, env=env)
        assert result.exit_code == 0, result.output
        assert started.pop("worker").token == token


def test_a_worker_without_a_token_is_a_usage_error(started, tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("")
    env = {"CORRAL_JOIN_TOKEN": None, "CORRAL_TOKEN": None}
    result = CliRunner().invoke(main, WORKER, env=env)
    assert result.exit_code == 2 and "--token-file" in result.output and "CORRAL_JOIN_TOKEN" in result.output
    result = CliRunner().invoke(main, [*WORKER, "--token-file", str(empty)], env=env)
    assert result.exit_code == 2 and "holds no token" in result.output
    assert started == {}


def test_the_router_reads_the_admin_token_from_the_environment(started):
    assert CliRunner().invoke(main, ROUTER, env={"CORRAL_TOKEN": "admin"}).exit_code == 0
    assert started["router"] == "admin"


@pytest.mark.parametrize(("flag", "config", "required"), [
    ([], "", False), (["--metrics-token-required"], "", True), ([], "metrics: {require_token: true}\n", True)])
def test_metrics_can_require_the_token_by_flag_or_config(started, tmp_path, flag, config, required):
    config_file = tmp_path / "corral.yaml"
    config_file.write_text(config)
    result = CliRunner().invoke(main, ["controller", "--data-dir", str(tmp_path / "data"), "--config",
                                       str(config_file), *flag])
    assert result.exit_code == 0, result.output
    assert started["controller"].metrics_token_required is required
    assert (tmp_path / "data").stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize(("flag", "retention"), [([], 365 * 86400.0), (["--audit-retention", "90d"], 90 * 86400.0)])
def test_the_audit_logs_retention_is_a_controller_option(started, tmp_path, flag, retention):
    result = CliRunner().invoke(main, ["controller", "--data-dir", str(tmp_path / "data"), *flag])
    assert result.exit_code == 0, result.output
    assert started["controller"].audit_retention == retention


@pytest.mark.parametrize("value", ["0", "-1d", "forever"])
def test_a_bad_audit_retention_is_a_usage_error(started, tmp_path, value):
    result = CliRunner().invoke(main, ["controller", "--data-dir", str(tmp_path / "data"), "--audit-retention", value])
    assert result.exit_code == 2 and "--audit-retention" in result.output
    assert "controller" not in started


def test_the_networks_webhooks_may_reach_are_a_controller_option(started, tmp_path):
    args = ["controller", "--data-dir", str(tmp_path / "data")]
    assert CliRunner().invoke(main, args).exit_code == 0
    assert started["controller"].notify_allow == ()
    result = CliRunner().invoke(main, [*args, "--notify-allow", "10.20.0.0/16", "--notify-allow", "::1"])
    assert result.exit_code == 0, result.output
    assert [str(network) for network in started["controller"].notify_allow] == ["10.20.0.0/16", "::1/128"]


@pytest.mark.parametrize("value", ["intranet", "10.0.0.0/33", ""])
def test_a_bad_network_to_let_webhooks_reach_is_a_usage_error(started, tmp_path, value):
    result = CliRunner().invoke(main, ["controller", "--data-dir", str(tmp_path / "data"), "--notify-allow", value])
    assert result.exit_code == 2 and "--notify-allow" in result.output and "is not an IP network" in result.output
    assert "controller" not in started
