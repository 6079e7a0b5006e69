"""The controller's config file (pools and quotas): read and validated before anything starts."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from corral.cli.main import main
from corral.core.config import ConfigError, parse_config


def load(path):
    return parse_config(path.read_text(), str(path))


def test_a_config_file_reads_pools_and_quotas(tmp_path):
    path = tmp_path / "corral.yaml"
    path.write_text("pools:\n  a100: {sequencer: fair-share, reservation_time: 15m, max_per_job: {gpu: 64}}\n"
                    "quotas:\n  vision: {limits: {gpu: 8, memory: 512G}}\n")
    policy = load(path)
    assert policy.pools["a100"].sequencer == "fair-share" and policy.pools["a100"].reservation_time == 900
    assert policy.quotas["vision"].limits == {"gpu": 8, "memory": 512 * 10**9}


@pytest.mark.parametrize(("text", "message"), [
    ("pools: {a100: {strategy: random}}", "strategy"),
    ("pools: {a100: {colour: blue}}", "colour"),
    ("quotas: {vision: {limits: {gpu: -1}}}", "gpu"),
    ("queues: {}", "queues"),
    ("pools: [a100", "cannot read"),
])
def test_a_bad_config_file_is_refused_naming_the_problem(tmp_path, text, message):
    path = tmp_path / "corral.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load(path)
    result = CliRunner().invoke(main, ["controller", "--data-dir", str(tmp_path / "data"), "--config", str(path)])
    assert result.exit_code == 2 and "--config" in result.output


@pytest.fixture
def started(monkeypatch):
    """What `corral controller` and `corral router` would have run with, instead of running it."""
    calls: dict = {}
    monkeypatch.setattr("corral.controller.server.serve", lambda settings: calls.update(controller=settings))
    monkeypatch.setattr("corral.serving.standalone.run_router",
                        lambda url, token, host, port, config: calls.update(router=config))
    return calls


ROUTER = ["router", "--controller", "http://127.0.0.1:1"]


def test_the_controller_and_a_standalone_router_read_the_router_from_the_same_file(started, tmp_path):
    path = tmp_path / "corral.yaml"
    path.write_text("pools: {a100: {strategy: dispersed}}\nrouter: {max_wait: 5, matrix: {sets: [[a, b]]}}\n")
    runner = CliRunner()
    result = runner.invoke(main, ["controller", "--data-dir", str(tmp_path / "data"), "--config", str(path)])
    assert result.exit_code == 0, result.output
    assert started["controller"].config.router.max_wait == 5
    assert started["controller"].config.pools["a100"].strategy == "dispersed"
    result = runner.invoke(main, [*ROUTER, "--config", str(path)], env={"CORRAL_TOKEN": "t"})
    assert result.exit_code == 0, result.output
    assert started["router"] == started["controller"].config.router


def test_a_standalone_router_reads_a_router_only_file_and_refuses_a_bad_one(started, tmp_path):
    path = tmp_path / "router.yaml"
    path.write_text("max_wait: 7\ngroups: {big: {members: [llama]}}\n")
    result = CliRunner().invoke(main, [*ROUTER, "--config", str(path)], env={"CORRAL_TOKEN": "t"})
    assert result.exit_code == 0, result.output
    assert started.pop("router").max_wait == 7
    path.write_text("max_wait: later\n")
    result = CliRunner().invoke(main, [*ROUTER, "--config", str(path)], env={"CORRAL_TOKEN": "t"})
    assert result.exit_code == 2 and "router.max_wait: not a duration: 'later'" in result.output
    assert started == {}


def test_the_controller_refuses_the_router_config_variable_it_no_longer_reads(started, tmp_path):
    result = CliRunner().invoke(main, ["controller", "--data-dir", str(tmp_path / "data")],
                                env={"CORRAL_ROUTER_CONFIG": str(tmp_path / "router.yaml")})
    assert result.exit_code == 2 and "CORRAL_ROUTER_CONFIG is no longer read" in result.output
    assert started == {}
