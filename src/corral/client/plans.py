"""The API's operations, written once for the sync and the async client, as plans.

A plan is a generator that yields what to do next: a `Call` (it is sent the response back),
a `Sleep`, an `Item` to hand to the caller of an iterating operation, or, to read a stream,
an `Open` then `NEXT_LINE` steps (each is sent the next line, None at the end); its return
value is the operation's result. `Client` and `AsyncClient` only drive plans, so both give the same
results by construction, and no I/O happens in this module.
"""

from __future__ import annotations

import hashlib
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar

from corral.core.states import JobState

if TYPE_CHECKING:  # the models, imported by the plans that read them: importing the client loads no pydantic
    from pydantic import TypeAdapter

    from corral.core.deployment_views import CatalogView, DeploymentView
    from corral.core.spec import JobSpec, Workdir
    from corral.core.usage import UsageReport
    from corral.core.views import (
        ControllerView,
        EstimateStats,
        HistoryEntry,
        JobPage,
        JobView,
        PlacementAnalysis,
        RetryAttemptView,
        TaskView,
        WorkdirSharing,
        WorkerView,
    )
    from corral.core.what_if import WhatIfView

API = "/api/v1"
PAGE_SIZE = 500  # the controller accepts up to 1000

T = TypeVar("T")


class Call:
    """One request; `ok` lists statuses >= 400 that are answers, not errors; `timeout` None: the client's."""

    def __init__(self, method: str, path: str, *, ok: Iterable[int] = (), timeout: float | None = None,
                 **kwargs: Any) -> None:
        self.method, self.path, self.ok, self.timeout, self.kwargs = method, path, tuple(ok), timeout, kwargs


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Item:
    value: Any


@dataclass(frozen=True)
class Open:
    """Open `call` as a stream read line by line, with no read timeout (a stream stays quiet between lines) unless
    the call has a `timeout`: then a read that waits longer fails as a dropped stream does. The plan is sent the
    response's headers.

    A failure to connect, an HTTP error or a dropped stream is thrown into the plan as a CorralError
    (`status` None when no answer came), at this step or at a NEXT_LINE, so the plan decides what follows.
    """

    call: Call


class NextLine:
    """The next line of the stream last opened; the plan is sent None when the stream ended."""


NEXT_LINE = NextLine()

Step = Call | Sleep | Item | Open | NextLine
Plan = Generator[Step, Any, T]


def returning(plan: Plan[T]) -> Plan[None]:
    """An operation's plan as an iterating one whose one Item is its result: how the clients run every operation,
    so one that reads a stream on its way (`sse.wait`) is driven like the rest."""
    yield Item((yield from plan))


def advance(plan: Plan, reply: Any, failure: BaseException | None = None) -> Step | None:
    """An iterating plan's next step, after sending it `reply` or throwing `failure` into it; None once it is done."""
    try:
        return plan.throw(failure) if failure is not None else plan.send(reply)
    except StopIteration:
        return None


@cache
def list_of(model: type) -> TypeAdapter:
    """The reader of a JSON list of `model`, built on its first use: a command builds only the readers it uses."""
    from pydantic import TypeAdapter

    return TypeAdapter(list[model])


def submit(spec: JobSpec | dict, idempotency_key: str | None = None) -> Plan[JobView]:
    """Validated locally first, so a bad spec fails with the field named before any network round trip. Only the
    fields given are sent: the controller fills in the rest (a job launched from a task inherits its launcher's
    project and priority)."""
    from corral.core.spec import JobSpec
    from corral.core.views import JobView

    spec = spec if isinstance(spec, JobSpec) else JobSpec.model_validate(spec)
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    response = yield Call("POST", f"{API}/jobs", json=spec.model_dump(mode="json", exclude_unset=True),
                          headers=headers)
    return JobView.model_validate(response.json())


def submit_many(specs: Iterable[JobSpec | dict], idempotency_keys: Iterable[str | None] | None = None
                ) -> Plan[list[JobView]]:
    """One call for many jobs, each checked locally as `submit` checks one (the index of a bad one named): all
    are stored, or none. `idempotency_keys`: one per job (None for none)."""
    from corral.core.spec import JobBatch, JobSpec
    from corral.core.views import JobView

    specs = [spec if isinstance(spec, JobSpec) else JobSpec.model_validate(spec) for spec in specs]
    batch = JobBatch(jobs=specs, idempotency_keys=None if idempotency_keys is None else list(idempotency_keys))
    body: dict[str, Any] = {"jobs": [spec.model_dump(mode="json", exclude_unset=True) for spec in batch.jobs]}
    if batch.idempotency_keys is not None:
        body["idempotency_keys"] = batch.idempotency_keys
    response = yield Call("POST", f"{API}/jobs/batch", json=body)
    return list_of(JobView).validate_python(response.json())


def post_specs(specs: Sequence[Mapping[str, Any]], idempotency_keys: Sequence[str | None] | None = None, *,
               batch: bool = False, shared_workdir: bool = False) -> Plan[list[dict[str, Any]]]:
    """Job specs as their user wrote them, checked by the controller alone (its 422 names the field), in one call:
    one submission, or with `batch` one batch call (all stored, or none). The jobs as the controller's JSON
    objects: a command that sends what it was given and prints a few fields back builds no model (pydantic and
    the spec's models are most of `corral submit`'s start). `shared_workdir` (one submission): refused with a 409
    whose detail says `upload_needed` when the job's workdir must travel as a bundle."""
    keys = list(idempotency_keys) if idempotency_keys is not None else None
    if not batch:
        key = keys[0] if keys else None
        response = yield Call("POST", f"{API}/jobs", json=dict(specs[0]),
                              params={"shared_workdir": "true"} if shared_workdir else {},
                              headers={"Idempotency-Key": key} if key else {})
        return [response.json()]
    body: dict[str, Any] = {"jobs": [dict(spec) for spec in specs]}
    if keys is not None:
        body["idempotency_keys"] = keys
    response = yield Call("POST", f"{API}/jobs/batch", json=body)
    return response.json()


def get(job_id: int, rows: bool = False) -> Plan[JobView]:
    """The job's JobView, or with `rows` the controller's JSON object as it came."""
    response = yield Call("GET", f"{API}/jobs/{job_id}")
    if rows:
        return response.json()
    from corral.core.views import JobView

    return JobView.model_validate(response.json())


def tasks(job_id: int) -> Plan[list[TaskView]]:
    response = yield Call("GET", f"{API}/jobs/{job_id}/tasks")
    from corral.core.views import TaskView

    return list_of(TaskView).validate_python(response.json())


def history(job_id: int) -> Plan[list[HistoryEntry]]:
    response = yield Call("GET", f"{API}/jobs/{job_id}/history")
    from corral.core.views import HistoryEntry

    return list_of(HistoryEntry).validate_python(response.json())


def attempts(job_id: int) -> Plan[list[RetryAttemptView]]:
    """The job's retry chain, oldest first: each job's state and failure cause."""
    response = yield Call("GET", f"{API}/jobs/{job_id}/attempts")
    from corral.core.views import RetryAttemptView

    return list_of(RetryAttemptView).validate_python(response.json())


def placement(job_id: int) -> Plan[PlacementAnalysis]:
    """Each worker, and why it can or cannot take a task of the job now."""
    response = yield Call("GET", f"{API}/jobs/{job_id}/placement")
    from corral.core.views import PlacementAnalysis

    return PlacementAnalysis.model_validate(response.json())


def what_if(job_id: int) -> Plan[WhatIfView]:
    """A pending job's start estimate, and the smallest changes that would start it sooner."""
    response = yield Call("GET", f"{API}/jobs/{job_id}/what-if")
    from corral.core.what_if import WhatIfView

    return WhatIfView.model_validate(response.json())


def attachments(job_id: int) -> Plan[list[dict[str, Any]]]:
    """The job's attachments (AttachmentView's fields), newest first as the controller lists them."""
    response = yield Call("GET", f"{API}/jobs/{job_id}/attachments")
    return list(response.json())


def cancel(job_id: int) -> Plan[JobView]:
    response = yield Call("POST", f"{API}/jobs/{job_id}/cancel")
    from corral.core.views import JobView

    return JobView.model_validate(response.json())


def workers() -> Plan[list[WorkerView]]:
    response = yield Call("GET", f"{API}/workers")
    from corral.core.views import WorkerView

    return list_of(WorkerView).validate_python(response.json())


def controllers() -> Plan[list[ControllerView]]:
    response = yield Call("GET", f"{API}/controllers")
    from corral.core.views import ControllerView

    return list_of(ControllerView).validate_python(response.json())


def estimate_stats(days: float = 30.0) -> Plan[EstimateStats]:
    response = yield Call("GET", f"{API}/stats/estimates", params={"days": days})
    from corral.core.views import EstimateStats

    return EstimateStats.model_validate(response.json())


def usage(since: str | None = None, until: str | None = None, by: str = "project") -> Plan[UsageReport]:
    """Usage and cost over [since, until] (unix seconds, ISO 8601, or how long ago: 30d) by project, user or pool."""
    params = {"by": by, **{k: v for k, v in (("since", since), ("until", until)) if v is not None}}
    response = yield Call("GET", f"{API}/usage", params=params)
    from corral.core.usage import UsageReport

    return UsageReport.model_validate(response.json())


def healthz(timeout: float) -> Plan[bool]:
    """Whether the controller answers its health check; an error status is an answer (False), not raised."""
    response = yield Call("GET", "/healthz", ok=range(400, 600), timeout=timeout)
    return response.status_code == 200


def scale_deployment(name: str, replicas: int, reason: str) -> Plan[DeploymentView]:
    """`reason` lands in the deployment's history."""
    response = yield Call("POST", f"{API}/deployments/{name}/scale", json={"replicas": replicas, "reason": reason})
    from corral.core.deployment_views import DeploymentView

    return DeploymentView.model_validate(response.json())


def router_catalog() -> Plan[CatalogView]:
    """What a standalone router routes on: live deployments, their keys and healthy endpoints, and the pool."""
    response = yield Call("GET", f"{API}/router/catalog")
    from corral.core.deployment_views import CatalogView

    return CatalogView.model_validate(response.json())


def report_router_load(router: str, loads: dict[str, int]) -> Plan[None]:
    """A standalone router's load per deployment, for the controller's autoscaler."""
    yield Call("POST", f"{API}/router/load", json={"router": router, "loads": loads})


def job_filters(states: Iterable[JobState | str] | None, launched_by: int | None, owner: str | None,
                project: str | None) -> dict[str, Any]:
    """The jobs listing's query: states, the launching job, the owner (a user's name) and the project."""
    given = {"launched_by": launched_by, "owner": owner, "project": project}
    return {"state": [str(s) for s in states or ()], **{k: v for k, v in given.items() if v is not None}}


def job_page(states: Iterable[JobState | str] | None = None, limit: int = 100, cursor: int | None = None,
             launched_by: int | None = None, owner: str | None = None,
             project: str | None = None) -> Plan[dict[str, Any]]:
    """One page of the jobs listing, as the controller's JSON."""
    params: dict[str, Any] = {"limit": limit, **job_filters(states, launched_by, owner, project)}
    if cursor is not None:
        params["cursor"] = cursor
    response = yield Call("GET", f"{API}/jobs", params=params)
    return response.json()


def list_page(states: Iterable[JobState | str] | None = None, limit: int = 100, cursor: int | None = None,
              launched_by: int | None = None, owner: str | None = None, project: str | None = None) -> Plan[JobPage]:
    page = yield from job_page(states, limit, cursor, launched_by, owner, project)
    from corral.core.views import JobPage

    return JobPage.model_validate(page)


def count_jobs(states: Iterable[JobState | str] | None = None, launched_by: int | None = None,
               owner: str | None = None, project: str | None = None) -> Plan[int]:
    """How many jobs match, whatever the page size (the controller counts them). Only the count is read: the
    page's one job is not."""
    params: dict[str, Any] = {"limit": 1, "count": "true", **job_filters(states, launched_by, owner, project)}
    response = yield Call("GET", f"{API}/jobs", params=params)
    return int(response.json().get("total") or 0)


def list_jobs(states: Iterable[JobState | str] | None = None, limit: int | None = 100,
              launched_by: int | None = None, owner: str | None = None, project: str | None = None,
              rows: bool = False) -> Plan[None]:
    """Jobs newest first, across pages, at most `limit` of them (None: all): JobViews, or with `rows` the
    controller's JSON objects as they came (a listing that shows a few fields of each builds no model)."""
    states = list(states or ())
    cursor, left = None, limit
    while left is None or left > 0:
        read = job_page if rows else list_page
        page = yield from read(states, min(PAGE_SIZE, left or PAGE_SIZE), cursor, launched_by, owner, project)
        found, next_cursor = (page["items"], page["next_cursor"]) if rows else (page.items, page.next_cursor)
        items = found if left is None else found[:left]
        for item in items:
            yield Item(item)
        if left is not None:
            left -= len(items)
        if next_cursor is None or not found:
            return
        cursor = next_cursor


def workdir_sharing(workdir: Workdir | Mapping[str, str], pool: str, rows: bool = False) -> Plan[WorkdirSharing]:
    """How many alive workers of `pool` share the directory (and how many are alive), and whether its files must
    be uploaded; with `rows`, the controller's JSON object. `workdir`: a Workdir, or its fields."""
    path, filesystem = (workdir["path"], workdir["filesystem"]) if isinstance(workdir, Mapping) else \
        (workdir.path, workdir.filesystem)
    response = yield Call("GET", f"{API}/workdir/sharing", params={"path": path, "filesystem": filesystem,
                                                                   "pool": pool})
    if rows:
        return response.json()
    from corral.core.views import WorkdirSharing

    return WorkdirSharing.model_validate(response.json())


def has_bundle(digest: str) -> Plan[bool]:
    response = yield Call("HEAD", f"{API}/bundles/{digest}", ok=(404,))
    return response.status_code != 404


def upload_bundle(data: bytes) -> Plan[str]:
    """Upload an archive unless the controller has it already; returns its sha256."""
    digest = hashlib.sha256(data).hexdigest()
    if not (yield from has_bundle(digest)):
        yield Call("PUT", f"{API}/bundles/{digest}", content=data, headers={"Content-Type": "application/gzip"})
    return digest
