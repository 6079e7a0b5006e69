"""The controller's config file (pools and quotas): read and validated before anything starts."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from corral.cli.main import main
from corral.controller.settings import ConfigError, load_policy_file


def test_a_config_file_reads_pools_and_quotas(tmp_path):
    path = tmp_path / "corral.yaml"
    path.write_text("pools:\n  a100: {sequencer: fair-share, reservation_time: 15m, max_per_job: {gpu: 64}}\n"
                    "quotas:\n  vision: {limits: {gpu: 8, memory: 512G}}\n")
    policy = load_policy_file(path)
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
        load_policy_file(path)
    result = CliRunner().invoke(main, ["controller", "--data-dir", str(tmp_path / "data"), "--config", str(path)])
    assert result.exit_code == 2 and "--config" in result.output
