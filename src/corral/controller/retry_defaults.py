"""The layers under a job's own retry policy: the project default, then the cluster default.

The cluster default comes from the admin API (stored) over the controller's config file
(its `retry_policy:` key, in `CorralConfig`); both may leave fields out. A job's effective policy is fixed
when it is submitted, and its retries inherit it unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from corral.core.retries import RetryState
from corral.core.retry_policy import RetryPolicy, effective_policy
from corral.core.spec import JobSpec
from corral.store.retries import CLUSTER, stored_default, stored_defaults

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection


async def cluster_layers(connection: AsyncConnection, config_default: RetryPolicy | None) -> list[RetryPolicy | None]:
    return [await stored_default(connection, *CLUSTER), config_default]


async def policy_layers(connection: AsyncConnection, project: str,
                        config_default: RetryPolicy | None) -> list[RetryPolicy | None]:
    """Project default, then the cluster's (stored, then the config file's): what a job's own policy is merged
    over; both stored ones in one read."""
    stored = await stored_defaults(connection, [("project", project), CLUSTER])
    return [stored.get(("project", project)), stored.get(CLUSTER), config_default]


async def retry_columns(connection: AsyncConnection, spec: JobSpec, config_default: RetryPolicy | None) -> dict:
    """The job columns of a new job's effective policy; none when it is not to be retried."""
    policy = effective_policy([spec.retry_policy, *await policy_layers(connection, spec.project, config_default)])
    if not policy.max_retries:
        return {}
    return {"max_retries": policy.max_retries, "retry_policy": policy.model_dump(mode="json"),
            "retry_state": RetryState.ARMED}
