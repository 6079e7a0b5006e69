"""The config file as one model: what users write reads as before, and every bad input is one line naming the
file and the field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from corral.core.config import ConfigError, CorralConfig, parse_config
from corral.serving.policies import CostMatrixPolicy, FitPolicy, GroupPolicy, policy_from_config

FULL = """
pools:
  a100: {strategy: dispersed, sequencer: fair-share, reservation_time: 15m, max_per_job: {gpu: 64, memory: 1T}}
quotas:
  vision: {limits: {gpu: 8, memory: 512G}}
retry_policy:
  max_retries: 3
  retry_delay: 2m
metrics: {require_token: true}
router:
  max_wait: 30
  swap_timeout: 5m
  groups:
    big: {members: [llama, qwen], swap: true, exclusive: true}
"""


def test_one_file_holds_pools_quotas_the_retry_default_metrics_and_the_router():
    config = parse_config(FULL, "corral.yaml")
    assert config.pools["a100"].reservation_time == 900 and config.pools["a100"].max_per_job["memory"] == 10**12
    assert config.quotas["vision"].limits == {"gpu": 8, "memory": 512 * 10**9}
    assert (config.retry_policy.max_retries, config.retry_policy.retry_delay) == (3, 120)
    assert config.metrics.require_token
    assert (config.router.max_wait, config.router.swap_timeout) == (30, 300)
    assert isinstance(policy_from_config(config.router), GroupPolicy)


@pytest.mark.parametrize("text", ["", "# nothing yet\n", "{}"])
def test_an_empty_file_is_every_default(text):
    assert parse_config(text, "corral.yaml") == CorralConfig()
    assert isinstance(policy_from_config(CorralConfig().router), FitPolicy)


def test_a_router_only_file_reads_as_the_router_section():
    """The file `corral router --config` and CORRAL_ROUTER_CONFIG took: the router's keys at the top."""
    config = parse_config("max_wait: 60\nmatrix: {sets: [[llama, embed], [qwen, embed]], costs: {llama: 5}}\n",
                          "router.yaml")
    assert config.router.max_wait == 60 and config.router.matrix.costs == {"llama": 5}
    assert isinstance(policy_from_config(config.router), CostMatrixPolicy)


@pytest.mark.parametrize(("text", "message"), [
    ("pools: {a100: {strategy: random}}", "corral.yaml: pools.a100.strategy: Input should be"),
    ("pools: {a100: {colour: blue}}", "corral.yaml: pools.a100.colour: unknown field"),
    ("pools: {a100: {reservation_time: soon}}", "pools.a100.reservation_time: not a duration: 'soon'"),
    ("pools: {a100: {max_per_job: {memory: lots}}}", "pools.a100.max_per_job.memory"),
    ("pools: [a100]", "corral.yaml: pools: Input should be a valid dictionary"),
    ("quotas: {vision: {limits: {gpu: -1}}}", "quotas.vision.limits.gpu: Input should be greater than or equal to 0"),
    ("queues: {}", "corral.yaml: queues: unknown field"),
    ("retry_policy: {jitter: sometimes}", "retry_policy.jitter: Input should be"),
    ("retry_policy: {max_retries: -1}", "retry_policy.max_retries"),
    ("metrics: {require: yes}", "metrics.require: unknown field"),
    ("metrics: {require_token: perhaps}", "metrics.require_token: Input should be a valid boolean"),
    ("router: {max_wait: -1}", "router.max_wait: Input should be greater than or equal to 0"),
    ("router: {swap_timeout: 0}", "router.swap_timeout: Input should be greater than 0"),
    ("router: {groups: {big: {members: []}}}", "router.groups.big.members"),
    ("router: {groups: {big: {members: [a], size: 2}}}", "router.groups.big.size: unknown field"),
    ("router: {matrix: {costs: {a: 1}}}", "router.matrix.sets: Field required"),
    ("router: {groups: {}, matrix: {sets: []}}", "router: give one eviction policy: 'groups' or 'matrix', not both"),
    ("router: {}\nmax_wait: 5", "give max_wait under `router:`, not beside it"),
    ("- pools", "corral.yaml: the config must be a mapping of pools, quotas, retry_policy, metrics, router"),
    ("pools: [a100", "cannot read corral.yaml: line 1, column 13: expected ',' or ']'"),
    ("pools: {a: 1}\n\tquotas: {}", "cannot read corral.yaml: line 2"),
])
def test_every_bad_input_is_one_line_naming_the_file_and_the_field(text, message):
    with pytest.raises(ConfigError) as refused:
        parse_config(text, "corral.yaml")
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_every_problem_is_named_at_once():
    with pytest.raises(ConfigError) as refused:
        parse_config("pools: {a: {strategy: x}}\nquotas: {b: {limits: {gpu: -1}}}\n", "corral.yaml")
    assert "pools.a.strategy" in str(refused.value) and "; quotas.b.limits.gpu" in str(refused.value)



def test_the_readmes_config_examples_read():
    readme = Path(__file__).resolve().parents[2] / "README.md"
    blocks = re.findall(r"```yaml\n(.*?)```", readme.read_text(), re.S)
    configs = [block for block in blocks if block.partition(":")[0] in CorralConfig.model_fields]
    assert len(configs) == 3  # pools and quotas; the router; prices
    for block in configs:
        parse_config(block, "README.md")
