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
from corral.store.retries import CLUSTER, stored_default

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection


async def cluster_layers(connection: AsyncConnection, config_default: RetryPolicy | None) -> list[RetryPolicy | None]:
    return [await stored_default(connection, *CLUSTER), config_default]


def retry_columns(spec: JobSpec, layers: list[RetryPolicy | None]) -> dict:
    """The job columns of a new job's effective policy, its own over the `layers` (SubmitSettings.retry_layers);
    none when it is not to be retried. Whether it is comes from `max_retries` alone, the first layer's that sets it:
    most jobs are not, and are spared the merge of every field."""
    own = [spec.retry_policy, *layers]
    if not next((layer.max_retries for layer in own if layer is not None and layer.max_retries is not None), 0):
        return {}
    policy = effective_policy(own)
    if not policy.max_retries:
        return {}
    return {"max_retries": policy.max_retries, "retry_policy": policy.model_dump(mode="json"),
            "retry_state": RetryState.ARMED}
