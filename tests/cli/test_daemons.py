"""`corral controller` options: /metrics access."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from corral.cli.main import main


@pytest.fixture
def started(monkeypatch):
    """What the long-running command would have run with, instead of running it."""
    calls: dict = {}
    monkeypatch.setattr("corral.controller.server.serve", lambda settings: calls.update(controller=settings))
    return calls


@pytest.mark.parametrize(("flag", "config", "required"), [
    ([], "", False), (["--metrics-token-required"], "", True), ([], "metrics: {require_token: true}\n", True)])
def test_metrics_can_require_the_token_by_flag_or_config(started, tmp_path, flag, config, required):
    config_file = tmp_path / "corral.yaml"
    config_file.write_text(config)
    result = CliRunner().invoke(main, ["controller", "--data-dir", str(tmp_path / "data"), "--config",
                                       str(config_file), *flag])
    assert result.exit_code == 0, result.output
    assert started["controller"].metrics_token_required is required
