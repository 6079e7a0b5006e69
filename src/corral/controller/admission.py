"""What is refused at submission, with a 4xx that says why: more than the pool allows one job,
or a dependency on a job that does not exist. A job no worker present could hold is accepted:
workers may join, and until its scheduling timeout it waits, saying so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from corral.core.spec import JobSpec
from corral.scheduling.policy import over_pool_maximum
from corral.store.job_views import existing_job_ids

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from corral.controller.submit_settings import SubmitSettings


def job_total(spec: JobSpec) -> dict[str, float]:
    """What the job asks in all, summed over its tasks."""
    r, n = spec.resources, spec.replicas
    return {"cpu": r.cpu * n, "memory": float(r.memory * n), "gpu": float(r.gpu * n),
            **{name: amount * n for name, amount in r.custom.items()}}


async def refusal(connection: AsyncConnection, spec: JobSpec, settings: SubmitSettings) -> str | None:
    over = over_pool_maximum(await settings.pool_policy(connection, spec.pool), job_total(spec))
    if over is not None:
        return f"pool {spec.pool}: the job {over}"
    wanted = set(spec.after) | set(spec.after_any)
    if wanted:
        found = await existing_job_ids(connection, wanted)
        missing = sorted(wanted - found)
        if missing:
            return f"no job {', '.join(map(str, missing))} to wait for (after / after_any name existing jobs)"
    return None
