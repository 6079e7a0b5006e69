"""What a worker says about its mode, and what an order names as its account, are checked at the edge."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from corral.core.protocol import BuildOrder, Capacity, RegisterRequest


def register(**fields) -> RegisterRequest:
    return RegisterRequest(name="w1", address="10.0.0.2", capacity=Capacity(cpu=1, memory=1), **fields)


def test_a_worker_registers_its_mode_and_account_and_an_overlong_account_is_refused():
    assert (register().run_as_owners, register().account) == (False, None)
    assert register(run_as_owners=True, account="root").run_as_owners
    with pytest.raises(ValidationError):
        register(account="x" * 65)


@pytest.mark.parametrize("name", ["Alice", "1alice", "al ice", "../root", "a" * 33])
def test_a_build_order_names_only_a_plausible_local_account(name):
    with pytest.raises(ValidationError):
        BuildOrder(task_id=1, attempt=0, job_id=1, task_index=0, command=["true"], env={}, run_as=name)
