"""Jobs submitted from inside a task: their names, whether their launcher may still launch, and their bounds.

A task's token reaches no further than its job: a job it launches runs in the launcher's project (its quota and
fair share) and never above the launcher's priority, so a task can neither jump the queue, nor preempt others with
its children, nor spend another project's quota. What a child does not ask for it inherits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fastapi import HTTPException, status

from corral.core.spec import PRIORITY_BANDS, JobSpec
from corral.core.states import JOB_TERMINAL, JobState
from corral.scheduling.policy import DEFAULT_PROJECT
from corral.store.launches import launcher_row

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

NAME_LIMIT = 200  # the width of jobs.name


@dataclass(frozen=True)
class LaunchingJob:
    """The job whose task submits, as far as its children are bounded by it."""

    id: int
    name: str
    project: str
    priority: int


async def read_launcher(connection: AsyncConnection, launcher: int) -> LaunchingJob:
    """The launcher of a submission; a launcher that is ending can launch nothing (its children would be cancelled
    at once)."""
    row = await launcher_row(connection, launcher)
    if row is None:
        raise HTTPException(status.HTTP_409_CONFLICT, f"job {launcher} no longer exists; it cannot launch jobs")
    if JobState(row.state) in JOB_TERMINAL or row.state == JobState.TERMINATING:
        raise HTTPException(status.HTTP_409_CONFLICT,
                            f"job {launcher} is {row.state}{' (cancelled)' if row.cancelled else ''}; "
                            "an ending job cannot launch jobs")
    return LaunchingJob(launcher, row.name, (row.spec or {}).get("project") or DEFAULT_PROJECT, row.priority)


def launch_name(launcher: LaunchingJob, name: str) -> str:
    """`launcher-name/name` for a launched job (names read as a path down the launch tree)."""
    return f"{launcher.name}/{name}"[:NAME_LIMIT]


def bounded_by(launcher: LaunchingJob, spec: JobSpec) -> JobSpec:
    """The child's spec: its launcher's project, and its launcher's priority unless it asks for less.

    Asking for another project, or for a priority above the launcher's, is refused (403) with both named.
    """
    asked = spec.model_fields_set
    if "project" in asked and spec.project != launcher.project:
        raise HTTPException(status.HTTP_403_FORBIDDEN,
                            f"job {launcher.id} runs in project {launcher.project}: the jobs it launches run there "
                            f"too, not in project {spec.project}")
    if "priority" in asked and spec.priority > launcher.priority:
        raise HTTPException(status.HTTP_403_FORBIDDEN,
                            f"job {launcher.id} runs at priority {describe_priority(launcher.priority)}: the jobs it "
                            f"launches may ask for that or less, not {describe_priority(spec.priority)}")
    inherited = {"project": launcher.project}
    if "priority" not in asked:
        inherited["priority"] = launcher.priority
    return spec.model_copy(update=inherited)


def describe_priority(priority: int) -> str:
    """"100 (high)" for a band's value, else the number."""
    band = next((name for name, value in PRIORITY_BANDS.items() if value == priority), None)
    return f"{priority} ({band})" if band else str(priority)
