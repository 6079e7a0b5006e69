"""/api/v1/jobs: submit, list, inspect and cancel jobs."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Literal

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request, status
from fastapi.responses import JSONResponse

from corral.controller.admission import refusal
from corral.controller.audit import created_rows, note, note_each, rows_written
from corral.controller.files_api import sharing_in
from corral.controller.identity import allow, authenticate, principal_of, refuse_unless, visible_projects
from corral.controller.job_tokens import out_of_reach
from corral.controller.launches import bounded_by, launch_name, read_launcher
from corral.controller.params import PathId
from corral.controller.retry_defaults import retry_columns
from corral.controller.retry_views import retry_fields, retry_view_fields
from corral.controller.services import services_of
from corral.core.estimates import start_text
from corral.core.retry_policy import RetryPolicy
from corral.core.roles import Action
from corral.core.spec import JobBatch, JobSpec, begin_problem
from corral.core.states import JobState, TaskState
from corral.core.views import AttemptView, HistoryEntry, JobPage, JobView, StartEstimate, TaskView
from corral.core.wire import MAX_ID, STORED, Text
from corral.engine.cancel import AlreadyEnded, NoSuchJob, cancel_job, cancel_scheduled_retry
from corral.store.audit import write_audit
from corral.store.database import Conflict
from corral.store.estimates import StoredEstimate, read_estimates
from corral.store.job_views import (
    JobFilter,
    SortKey,
    attempt_rows,
    count_jobs,
    history_rows,
    job_id_by_key,
    jobs_with_task_counts,
    page_ids,
    task_rows,
)
from corral.store.jobs import NewJob, write_job_rows, written_job_row
from corral.store.launches import launched_within

if TYPE_CHECKING:
    from sqlalchemy import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"], dependencies=[Depends(authenticate)])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=JobView)
async def submit(spec: JobSpec, request: Request,
                 idempotency_key: Text | None = Header(None, max_length=200),
                 shared_workdir: bool = Query(False, description=(
                     "Refuse with 409 (`upload_needed` in its detail), storing nothing, a new job whose workdir has "
                     "no bundle when a worker of its pool that does not share the directory may take it, or none is "
                     "alive: its files must be uploaded first. Spares a client the question "
                     "(GET /api/v1/workdir/sharing) when they need not."))) -> JobView | JSONResponse:
    note(request, name=spec.name, project=spec.project)  # never more of the spec: its env may hold secrets
    views, created = await _accept(request, [spec], [idempotency_key], single=True, shared_workdir=shared_workdir)
    if created:
        return views[0]
    return JSONResponse(views[0].model_dump(mode="json"), status_code=status.HTTP_200_OK)


@router.post("/batch", status_code=status.HTTP_201_CREATED, response_model=list[JobView])
async def submit_batch(batch: JobBatch, request: Request) -> list[JobView] | JSONResponse:
    """Many jobs in one call, in one transaction: every spec is checked first, and one refused refuses them all
    (its index named). Each job is the job a single submission would make, audited as one."""
    note(request, jobs=len(batch.jobs))
    views, created = await _accept(request, batch.jobs, batch.keys(), single=False)
    note_each(request, [({"id": view.id}, {"name": view.spec.name, "project": view.spec.project})
                        for view in views])
    if created:
        return views
    return JSONResponse([view.model_dump(mode="json") for view in views], status_code=status.HTTP_200_OK)


async def _accept(request: Request, specs: list[JobSpec], keys: list[str | None], *, single: bool,
                  shared_workdir: bool = False) -> tuple[list[JobView], bool]:
    """Checks every spec, then stores the new ones in one write; the views in order, and whether any is new.
    A key already taken replays its job (or refuses, for another spec). With `shared_workdir`, a new job whose
    workdir must travel (no bundle, a worker of its pool not sharing it) is refused: see `submit`."""
    def where(i: int) -> list:
        return ["body"] if single else ["body", "jobs", i]

    def whose(i: int) -> str:
        return "" if single else f"jobs[{i}]: "

    services = services_of(request)
    now = time.time()
    for i, spec in enumerate(specs):
        late = begin_problem(spec.begin, now)
        if late:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                                [{"loc": [*where(i), "begin"], "msg": late, "type": "value_error"}])
    principal = principal_of(request)
    launcher = principal.job_id
    if launcher is not None:  # a task's children: bounded by the job that launches them (its project and priority)
        async with services.store.read() as connection:
            launching = await read_launcher(connection, launcher)
            specs = [bounded_by(launching, spec) for spec in specs]
            for job_id in {j for spec in specs for j in (*spec.after, *spec.after_any)}:
                if await launched_within(connection, job_id, launcher) is False:  # its state would show
                    raise HTTPException(status.HTTP_403_FORBIDDEN, out_of_reach(launcher, job_id))
    for project in dict.fromkeys(spec.project for spec in specs):
        refuse_unless(principal, Action.SUBMIT, project)
    for i, spec in enumerate(specs):
        if spec.bundle and not services.bundles.exists(spec.bundle):
            raise HTTPException(status.HTTP_400_BAD_REQUEST, f"{whose(i)}bundle {spec.bundle} was not uploaded "
                                                             f"(PUT /api/v1/bundles/{spec.bundle} first)")
    replayed = await _replays(request, specs, keys)
    fresh = [i for i in range(len(specs)) if i not in replayed]
    async with services.store.read_when_needed() as connection:  # the settings are mostly kept: no read at all
        for i in fresh:
            refused = await refusal(connection, specs[i], services.submit_settings)
            if refused:
                raise HTTPException(status.HTTP_400_BAD_REQUEST, whose(i) + refused)
            if shared_workdir and specs[i].workdir is not None and not specs[i].bundle:
                sharing = await sharing_in(connection, specs[i].workdir, specs[i].pool)
                if sharing.upload_needed:
                    pool, path = specs[i].pool, specs[i].workdir.path
                    why = (f"{sharing.alive - sharing.sharing} of the {sharing.alive} alive workers of pool {pool} "
                           f"do not share {path}") if sharing.alive else f"no worker of pool {pool} is alive"
                    raise HTTPException(status.HTTP_409_CONFLICT, {
                        "message": f"{whose(i)}{why}: upload its files as a bundle first",
                        **sharing.model_dump(mode="json")})
        layers = {project: await services.submit_settings.retry_layers(connection, project, services.retry_config)
                  for project in {specs[i].project for i in fresh}}

    def audit_rows(created: list[int]) -> list[dict]:
        """One row per job of the call, replays included, written with the new jobs."""
        ids = {**{i: view.id for i, view in replayed.items()}, **dict(zip(fresh, created, strict=True))}
        return created_rows(request, [({"id": ids[i]}, {"name": spec.name, "project": spec.project})
                                      for i, spec in enumerate(specs)])

    try:
        created = await _store(request, [specs[i] for i in fresh], [keys[i] for i in fresh], now,
                               layers, audit_rows) if fresh else []
    except Conflict:  # a key submitted concurrently: nothing of this call was stored; its jobs replay now
        if not any(keys[i] for i in fresh):
            raise
        return await _accept(request, specs, keys, single=single)
    if created:
        services.engine.wake()
    views = {**replayed, **dict(zip(fresh, created, strict=True))}
    return [views[i] for i in range(len(specs))], bool(created)


async def _store(request: Request, specs: list[JobSpec], keys: list[str | None], now: float,
                 layers: dict[str, list[RetryPolicy | None]],
                 audit_rows: Callable[[list[int]], list[dict]]) -> list[JobView]:
    """The new jobs, all written in one transaction with the call's audit rows (given the new ids), and their views
    built from what was written (not read back: nothing else can have changed a job before its reply). Concurrent
    calls' jobs are written and committed together (`write_submissions`)."""
    principal = principal_of(request)
    new, rows = await services_of(request).submissions.write(
        Submission(specs, keys, layers, principal.name, principal.job_id, now, audit_rows))
    rows_written(request)
    return [new_job_view(SimpleNamespace(**written_job_row(row)), job.spec) for job, row in zip(new, rows, strict=True)]


@dataclass(frozen=True)
class Submission:
    """One call's new jobs, as `write_submissions` writes them."""

    specs: list[JobSpec]
    keys: list[str | None]
    layers: dict[str, list[RetryPolicy | None]]
    owner: str
    launcher: int | None  # the job whose token submits them, if any
    now: float
    audit_rows: Callable[[list[int]], list[dict]]

    async def new_jobs(self, connection: AsyncConnection) -> list[NewJob]:
        if self.launcher is not None:  # read again in this transaction: the launcher may be ending by now
            launching = await read_launcher(connection, self.launcher)
        new = []
        for spec, key in zip(self.specs, self.keys, strict=True):
            name = launch_name(launching, spec.name or "") if self.launcher is not None else spec.name or ""
            retry = retry_columns(spec, self.layers[spec.project])
            new.append(NewJob(spec, key, name=name, launched_by=self.launcher,
                              columns={"owner": self.owner, **retry}))
        return new


async def write_submissions(connection: AsyncConnection,
                            submissions: list[Submission]) -> list[tuple[list[NewJob], list[dict[str, Any]]]]:
    """Concurrent calls' jobs in one set of statements (the job rows, then all their tasks, their history records,
    their audit rows), each table's rows in the calls' order as if written one call after the other: each call's
    new jobs and the columns written for them (their ids among them). A group of calls costs four statements, not
    four a call."""
    made = [await submission.new_jobs(connection) for submission in submissions]
    return await connection.run_sync(_write_new, submissions, made)


def _write_new(connection: Connection, submissions: list[Submission],
               made: list[list[NewJob]]) -> list[tuple[list[NewJob], list[dict[str, Any]]]]:
    """`write_submissions`'s four statements, in the one greenlet of a `run_sync` rather than one each."""
    rows = write_job_rows(connection, [(job, submission.now) for submission, new
                                       in zip(submissions, made, strict=True) for job in new])
    written, audit, start = [], [], 0
    for submission, new in zip(submissions, made, strict=True):
        own, start = rows[start:start + len(new)], start + len(new)
        audit += submission.audit_rows([row["id"] for row in own])
        written.append((new, own))
    write_audit(connection, audit)
    return written


async def _replays(request: Request, specs: list[JobSpec], keys: list[str | None]) -> dict[int, JobView]:
    """The jobs already submitted under the keys given, by index: each must have been submitted with the same
    spec, and (for a task's token) within its launch tree."""
    found: dict[int, JobView] = {}
    for i, key in enumerate(keys):
        if key and (existing := await _job_by_key(request, key)) is not None:
            await _check_replay(request, existing, specs[i], key)
            found[i] = existing
    return found


async def _check_replay(request: Request, existing: JobView, spec: JobSpec, key: str) -> None:
    caller = principal_of(request).job_id
    if caller is not None:  # a task's token answers for its launch tree only, replays included
        async with services_of(request).store.read() as connection:
            if not await launched_within(connection, existing.id, caller):
                raise HTTPException(status.HTTP_409_CONFLICT,
                                    f"idempotency key {key!r} is taken by a job that the token of job {caller} "
                                    "does not reach")
    if existing.spec != spec:
        raise HTTPException(status.HTTP_409_CONFLICT,
                            f"idempotency key {key!r} was used for job {existing.id} with another spec")


async def _job_by_key(request: Request, key: str) -> JobView | None:
    async with services_of(request).store.read() as connection:
        job_id = await job_id_by_key(connection, key)
    return (await job_views(request, [job_id]))[0] if job_id else None


@router.get("", response_model=JobPage)
async def list_jobs(request: Request, state: list[JobState] = Query(default=[]),
                    limit: int = Query(100, ge=1, le=1000), cursor: int | None = Query(None, ge=1, le=MAX_ID),
                    name: Text | None = Query(None, max_length=200, description="A part of the name, any case."),
                    project: Text | None = Query(None, max_length=200), pool: Text | None = Query(None, max_length=200),
                    sort: SortKey = Query("id"), order: Literal["asc", "desc"] = Query("desc"),
                    offset: int = Query(0, ge=0, le=10_000_000),
                    count: bool = Query(False, description="Also count the jobs that match (`total`)."),
                    launched_by: int | None = Query(None, ge=1, le=MAX_ID),
                    owner: Text | None = Query(None, max_length=64, description="Only this user's jobs.")) -> JobPage:
    """The jobs of the projects the caller may read (a cluster admin: all)."""
    if cursor is not None and (sort != "id" or offset):
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "cursor pages only by id: drop sort or offset, or the cursor")
    principal = principal_of(request)
    if project is not None:
        refuse_unless(principal, Action.READ, project)
    where = JobFilter(state, name, project, pool, launched_by, within=principal.job_id, owner=owner,
                      projects=visible_projects(principal))
    async with services_of(request).store.read() as connection:
        ids = await page_ids(connection, where, sort, order == "desc", limit, offset, cursor)
        total = await count_jobs(connection, where) if count else None
    more = len(ids) > limit
    ids = ids[:limit]
    return JobPage(items=await job_views(request, ids), next_cursor=ids[-1] if more and sort == "id" else None,
                   total=total)


@router.get("/{job_id}", response_model=JobView, dependencies=[Depends(allow(Action.READ, "job", job_tokens=True))])
async def get_job(job_id: PathId, request: Request) -> JobView:
    return await _one(request, job_id)


async def _one(request: Request, job_id: int) -> JobView:
    views = await job_views(request, [job_id])
    if not views:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}")
    return views[0]


@router.get("/{job_id}/tasks", response_model=list[TaskView],
            dependencies=[Depends(allow(Action.READ, "job", job_tokens=True))])
async def job_tasks(job_id: PathId, request: Request) -> list[TaskView]:
    await _one(request, job_id)
    async with services_of(request).store.read() as connection:
        found = await task_rows(connection, job_id)
        attempts = await attempt_rows(connection, [t.id for t in found])
    by_task = defaultdict(list)
    for row in attempts:
        by_task[row.task_id].append(AttemptView.model_validate(row, from_attributes=True))
    return [
        TaskView(id=t.id, index=t.index, state=t.state, attempt=t.attempt, worker_id=t.worker_id,
                 gpu_ids=t.gpu_ids or [], failures=t.failures, preemptions=t.preemptions, exit_code=t.exit_code,
                 reason=t.reason, state_since=t.state_since, attempts=by_task[t.id], preempt_epoch=t.preempt_epoch,
                 checkpoint_epoch=t.checkpoint_epoch, checkpoint_size=t.checkpoint_size)
        for t in found
    ]


@router.get("/{job_id}/history", response_model=list[HistoryEntry],
            dependencies=[Depends(allow(Action.READ, "job", job_tokens=True))])
async def job_history(job_id: PathId, request: Request) -> list[HistoryEntry]:
    await _one(request, job_id)
    async with services_of(request).store.read() as connection:
        rows = await history_rows(connection, job_id)
    return [HistoryEntry.model_validate(row, from_attributes=True) for row in rows]


@router.post("/{job_id}/cancel", response_model=JobView,
             dependencies=[Depends(allow(Action.CANCEL, "job", job_tokens=True))])
async def cancel(job_id: PathId, request: Request) -> JobView:
    services = services_of(request)
    try:
        async with services.store.write() as connection:
            await cancel_job(connection, job_id, time.time())
    except NoSuchJob as error:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(error)) from None
    except AlreadyEnded as error:
        async with services.store.write() as connection:  # an ended job may still have a retry to stop
            if not await cancel_scheduled_retry(connection, job_id, time.time()):
                raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    services.engine.wake()
    return await _one(request, job_id)


async def job_views(request: Request, ids: list[int]) -> list[JobView]:
    if not ids:
        return []
    async with services_of(request).store.read() as connection:
        rows, counts = await jobs_with_task_counts(connection, ids)
        retry = await retry_fields(connection, list(rows.values()))
        pending = [i for i, r in rows.items() if r.state == JobState.PENDING]
        estimates = await read_estimates(connection, pending) if pending else {}
    now = time.time()
    return [job_view(r, JobSpec.model_validate(r.spec, context=STORED), counts[r.id], retry[r.id],
                     estimate_view(estimates.get(r.id), now))
            for r in (rows[i] for i in ids if i in rows)]


def job_view(r: Any, spec: JobSpec, task_counts: dict[str, int], retry: dict,
             estimate: StartEstimate | None = None) -> JobView:
    """The one place a JobView is made, from a job's row (read, or as just written), its parsed spec, its tasks'
    counts by state, its retry fields and its start estimate. Validated as what is stored (`STORED`): the spec was
    judged when it came in (its size among the rest, by a dump to JSON), not again for each view of it, and a cap
    lowered since must not make a stored job unreadable."""
    return JobView.model_validate(dict(
        id=r.id, name=r.name, state=r.state, gang=r.gang, priority=r.priority, replicas=r.replicas, spec=spec,
        pending_reason=r.pending_reason, created_at=r.created_at, state_since=r.state_since, finished_at=r.finished_at,
        task_counts=task_counts, idempotency_key=r.idempotency_key, preemption_epoch=r.preemption_epoch,
        drain_trigger=r.drain_trigger, launched_by=r.launched_by, owner=r.owner, estimate=estimate, **retry),
        context=STORED)


def estimate_view(stored: StoredEstimate | None, now: float) -> StartEstimate | None:
    if stored is None:
        return None
    return StartEstimate(text=start_text(stored.start_at, stored.after_job, stored.unknown, stored.never, now),
                         start_at=stored.start_at, all_started_at=stored.all_started_at, after_job=stored.after_job,
                         basis=stored.basis, unknown=stored.unknown, never=stored.never, made_at=stored.made_at)


def new_job_view(r: Any, spec: JobSpec) -> JobView:
    """A job just written: all its tasks pending, alone in its retry chain."""
    return job_view(r, spec, {TaskState.PENDING: r.replicas}, retry_view_fields(r, [r.id]))
