"""The eviction policies are pure functions of (target, running, fits)."""

from __future__ import annotations

import pytest

from corral.core.config import CostMatrix, RouterConfig
from corral.serving.policies import CostMatrixPolicy, FitPolicy, GroupPolicy, policy_from_config


def room_for(slots: int, running: list[str]):
    """fits(evicting): whether one more fits among `running` less the evicted ones, with `slots` in all."""
    return lambda evicting: len(set(running) - evicting) < slots


def test_fit_evicts_nothing_when_there_is_room():
    assert FitPolicy().evict_for("c", ["a", "b"], room_for(3, ["a", "b"])) == []


def test_fit_evicts_the_least_recently_used_until_it_fits():
    assert FitPolicy().evict_for("d", ["a", "b", "c"], room_for(2, ["a", "b", "c"])) == ["a", "b"]


def test_fit_keeps_an_early_eviction_that_turned_out_not_needed():
    sizes = {"small": 1, "big": 4}
    fits = lambda evicting: sum(v for k, v in sizes.items() if k not in evicting) + 4 <= 5  # noqa: E731
    assert FitPolicy().evict_for("new", ["small", "big"], fits) == ["big"]


def test_fit_says_none_when_nothing_makes_room_now():
    assert FitPolicy().evict_for("b", ["a"], lambda evicting: False) is None


GROUPS = {
    "big": {"members": ["llama", "qwen"]},  # swap, exclusive
    "small": {"members": ["embed", "rerank"], "swap": False, "exclusive": False},
    "always": {"members": ["guard"], "swap": False, "exclusive": False, "persistent": True},
}


def test_group_swap_evicts_its_own_running_member_and_exclusive_evicts_other_groups_but_not_persistent():
    policy = policy_from_config(RouterConfig(groups=GROUPS))
    assert policy.evict_for("qwen", ["llama", "embed", "guard"], lambda e: True) == ["llama", "embed"]


def test_a_non_exclusive_non_swap_group_member_evicts_nothing():
    policy = GroupPolicy.from_config(RouterConfig(groups=GROUPS).groups)
    assert policy.evict_for("rerank", ["llama", "embed", "guard"], lambda e: True) == []


def test_matrix_picks_the_allowed_set_that_costs_least_to_reach():
    policy = CostMatrixPolicy.from_config(CostMatrix(sets=[["a", "b"], ["a", "c", "d"]], costs={"b": 10}))
    assert policy.evict_for("a", ["b", "c", "d"], lambda e: True) == ["c", "d"]  # 2 < 10
    assert policy.evict_for("a", ["b"], lambda e: True) == []


def test_matrix_runs_a_target_in_no_set_alone():
    policy = CostMatrixPolicy.from_config(CostMatrix(sets=[["a", "b"]]))
    assert policy.evict_for("z", ["a", "b"], lambda e: True) == ["a", "b"]


def test_two_policies_at_once_are_refused():
    with pytest.raises(ValueError, match="one eviction policy"):
        RouterConfig(groups={}, matrix={"sets": []})
