"""The async Python client: the same operations as `Client`, awaited, over httpx.AsyncClient.

It drives the very plans the sync client drives (see `plans`), so both return the same
models and raise the same errors for the same answers.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, overload

import httpx

from corral.client import functions, logs, plans, sse, teams
from corral.client.bundle import TreeMemo, make_bundle
from corral.client.errors import CorralError
from corral.client.http import RESENT_STATUSES, checked, endpoint, message, try_again, unreachable
from corral.client.httpx_session import tls_verification, unanswered
from corral.client.jobs import AsyncFunctionJob
from corral.client.plans import Call, Item, NextLine, Open, Plan, Sleep, advance, returning
from corral.client.relay import ExecResult, PortForwarder, Relay, capture_exec
from corral.client.sse import RECONNECTS, Event, follow_events
from corral.core.deployment_views import CatalogView, DeploymentView
from corral.core.spec import JobSpec, Resources, Workdir
from corral.core.states import JobState
from corral.core.usage import UsageReport
from corral.core.views import (
    EstimateStats,
    HistoryEntry,
    JobPage,
    JobView,
    RetryAttemptView,
    TaskView,
    WorkdirSharing,
    WorkerView,
)
from corral.core.what_if import WhatIfView


class AsyncClient:
    """`async with AsyncClient() as client: job = await client.submit(fn)`."""

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._controllers, token, self._source = endpoint(url, token)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(headers=headers, timeout=timeout, transport=transport,
                                       verify=tls_verification(self._controllers.urls))
        self.relay = Relay(self.url, token)

    @property
    def url(self) -> str:
        """As `Client.url`."""
        return self._controllers.current

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    # driving plans -----------------------------------------------------------------------

    async def request(self, method: str, path: str, *, ok: Iterable[int] = (), **kwargs: Any) -> httpx.Response:
        """As `Client.request`."""
        for tries in itertools.count(1):
            url, response, error = self.url, None, None
            try:
                response = await self._http.request(method, url + path, **kwargs)
            except httpx.TransportError as failed:
                error = unanswered(failed)
            if not try_again(self._controllers, self._source, url, tries, method, kwargs, response, error):
                return checked(response, ok)

    async def _step(self, step: Call | Sleep) -> httpx.Response | None:
        if isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
            return None
        kwargs = dict(step.kwargs)
        if step.timeout is not None:
            kwargs["timeout"] = step.timeout
        return await self.request(step.method, step.path, ok=step.ok, **kwargs)

    async def _run(self, plan: Plan) -> Any:
        """As `Client._run`."""
        result = self._iterate(returning(plan))
        try:
            return await anext(result)
        finally:
            await result.aclose()

    @asynccontextmanager
    async def stream(self, method: str, path: str, read_timeout: float | None = None,
                     **kwargs: Any) -> AsyncIterator[httpx.Response]:
        """As `Client.stream`."""
        timeout = httpx.Timeout(self._http.timeout.connect, read=read_timeout)
        url = self.url
        try:
            async with self._http.stream(method, url + path, timeout=timeout, **kwargs) as response:
                if response.status_code >= 400:
                    await response.aread()
                    if response.status_code in RESENT_STATUSES:
                        self._controllers.failed(url)
                    raise CorralError(response.status_code, message(response, path))
                yield response
        except httpx.TransportError as error:
            self._controllers.failed(url)
            raise unreachable(url, self._source, error) from None

    async def _iterate(self, plan: Plan) -> AsyncIterator:
        """As `Client._iterate`."""
        async with AsyncExitStack() as opened:
            lines: AsyncIterator[str] | None = None
            reply: Any = None
            failure: CorralError | None = None
            while (step := advance(plan, reply, failure)) is not None:
                reply, failure = None, None
                if isinstance(step, Item):
                    yield step.value
                elif isinstance(step, Open):
                    await opened.aclose()
                    try:
                        response = await opened.enter_async_context(
                            self.stream(step.call.method, step.call.path, step.call.timeout, **step.call.kwargs))
                        lines, reply = response.aiter_lines(), response.headers
                    except CorralError as error:
                        failure = error
                elif isinstance(step, NextLine):
                    url = self.url
                    try:
                        reply = await anext(lines, None) if lines is not None else None
                    except httpx.TransportError as error:
                        self._controllers.failed(url)
                        failure = unreachable(url, self._source, error)
                    if reply is None:
                        await opened.aclose()
                else:
                    reply = await self._step(step)

    # jobs --------------------------------------------------------------------------------

    @overload
    async def submit(self, target: JobSpec | dict, *, idempotency_key: str | None = None) -> JobView: ...

    @overload
    async def submit(self, target: Callable, *args: Any, resources: Resources | Mapping | None = None,
                     replicas: int | None = None, workdir: str | os.PathLike | None = None,
                     options: Mapping[str, Any] | None = None, idempotency_key: str | None = None,
                     pip: Sequence[str] | None = None, python: str | None = None,
                     **kwargs: Any) -> AsyncFunctionJob: ...

    async def submit(self, target, *args, resources=None, replicas=None, workdir=None, options=None, pip=None,
                     python=None, idempotency_key=None, **kwargs):
        """As `Client.submit`: a spec gives its JobView, a function an AsyncFunctionJob."""
        if isinstance(target, JobSpec | dict):
            if args or kwargs or resources or replicas or workdir or options or pip or python:
                raise TypeError("a job spec carries its own options: pass only idempotency_key with it")
            return await self._run(plans.submit(target, idempotency_key))
        view = await self._run(functions.submit_function(
            target, args, kwargs, resources=resources, replicas=replicas, workdir=workdir, options=options,
            pip=pip, python=python, idempotency_key=idempotency_key))
        return AsyncFunctionJob(self, view)

    async def submit_many(self, specs: Iterable[JobSpec | dict], *,
                          idempotency_keys: Iterable[str | None] | None = None) -> list[JobView]:
        """As `Client.submit_many`."""
        return await self._run(plans.submit_many(specs, idempotency_keys))

    async def get(self, job_id: int) -> JobView:
        return await self._run(plans.get(job_id))

    async def list_page(self, states: Iterable[JobState | str] | None = None, limit: int = 100,
                        cursor: int | None = None, launched_by: int | None = None, owner: str | None = None,
                        project: str | None = None) -> JobPage:
        return await self._run(plans.list_page(states, limit, cursor, launched_by, owner, project))

    def list(self, states: Iterable[JobState | str] | None = None, limit: int | None = 100,
             launched_by: int | None = None, owner: str | None = None,
             project: str | None = None) -> AsyncIterator[JobView]:
        return self._iterate(plans.list_jobs(states, limit, launched_by, owner, project))

    def list_rows(self, states: Iterable[JobState | str] | None = None, limit: int | None = 100,
                  launched_by: int | None = None, owner: str | None = None,
                  project: str | None = None) -> AsyncIterator[dict[str, Any]]:
        """As `list`, each job as the controller's JSON object, not validated (see `Client.list_rows`)."""
        return self._iterate(plans.list_jobs(states, limit, launched_by, owner, project, rows=True))

    async def count(self, states: Iterable[JobState | str] | None = None, launched_by: int | None = None,
                    owner: str | None = None, project: str | None = None) -> int:
        """How many jobs are in `states` (any state if none), launched by a job, of an owner or of a project."""
        return await self._run(plans.count_jobs(states, launched_by, owner, project))

    async def whoami(self) -> dict[str, Any]:
        """Who this client's token acts as: name, role, projects and the token's kind and expiry."""
        return await self._run(teams.whoami())

    async def tasks(self, job_id: int) -> list[TaskView]:
        return await self._run(plans.tasks(job_id))

    async def history(self, job_id: int) -> list[HistoryEntry]:
        return await self._run(plans.history(job_id))

    async def attempts(self, job_id: int) -> list[RetryAttemptView]:
        """The job's retry chain, oldest first: each job's state and failure cause."""
        return await self._run(plans.attempts(job_id))

    async def what_if(self, job_id: int) -> WhatIfView:
        """A pending job's start estimate, and the smallest changes that would start it sooner (a 409 if it is not
        pending)."""
        return await self._run(plans.what_if(job_id))

    async def cancel(self, job_id: int) -> JobView:
        return await self._run(plans.cancel(job_id))

    async def wait(self, job_id: int, timeout: float | None = None) -> JobView:
        """As `Client.wait`."""
        return await self._run(sse.wait(job_id, timeout))

    async def results(self, job_id: int, timeout: float | None = None) -> list:
        return await self._run(functions.results(job_id, None, timeout))

    def logs(self, job_id: int, task: int = 0, stream: str = "stdout", attempt: int | None = None,
             follow: bool = False, poll: float = 0.5,
             on_attempt: Callable[[int], None] | None = None) -> AsyncIterator[bytes]:
        if follow:
            return self._iterate(logs.follow_logs(job_id, task, stream, attempt, poll, on_attempt))
        return self._iterate(logs.read_logs(job_id, task, stream, attempt))

    def events(self, job: int | None = None, last_event_id: str | None = None, *, deployment: str | None = None,
               last: int | None = None, follow: bool = True,
               reconnects: int | None = RECONNECTS) -> AsyncIterator[Event]:
        """As `Client.events`, as an async iterator."""
        return self._iterate(follow_events({"job": job, "deployment": deployment, "last": last}, last_event_id,
                                           follow, reconnects))

    # workers and bundles -----------------------------------------------------------------

    async def exec(self, job_id: int, command: Sequence[str], *, task: int = 0, stdin: bytes = b"") -> ExecResult:
        """As `Client.exec`."""
        async with self.relay.exec(job_id, command, task) as channel:
            return await capture_exec(channel, stdin)

    @asynccontextmanager
    async def port_forward(self, job_id: int, remote_port: int, *, local_port: int = 0, task: int = 0,
                           address: str = "127.0.0.1") -> AsyncIterator[tuple[str, int]]:
        """As `Client.port_forward`, served by the running event loop."""
        async with PortForwarder(self.relay, job_id, remote_port, task=task, address=address,
                                 local_port=local_port) as forwarder:
            yield forwarder.bound

    async def attachments(self, job_id: int) -> list[dict[str, Any]]:
        return await self._run(plans.attachments(job_id))

    async def workers(self) -> list[WorkerView]:
        return await self._run(plans.workers())

    async def estimate_stats(self, days: float = 30.0) -> EstimateStats:
        """How right the start estimates of jobs started in the last `days` were, by how far ahead they were made."""
        return await self._run(plans.estimate_stats(days))

    async def usage(self, since: str | None = None, until: str | None = None, by: str = "project") -> UsageReport:
        """Usage and cost over [since, until] (default: the last 30 days) by project, user or pool."""
        return await self._run(plans.usage(since, until, by))

    # serving: what a standalone router asks of the controller ----------------------------

    async def scale_deployment(self, name: str, replicas: int, reason: str) -> DeploymentView:
        return await self._run(plans.scale_deployment(name, replicas, reason))

    async def router_catalog(self) -> CatalogView:
        return await self._run(plans.router_catalog())

    async def report_router_load(self, router: str, loads: dict[str, int]) -> None:
        await self._run(plans.report_router_load(router, loads))

    async def workdir_sharing(self, workdir: Workdir, pool: str = "default") -> WorkdirSharing:
        return await self._run(plans.workdir_sharing(workdir, pool))

    async def upload_bundle(self, directory: str | os.PathLike) -> str:
        memo = TreeMemo(directory)
        known = memo.digest()
        if known is not None and await self._run(plans.has_bundle(known)):
            return known
        digest = await self._run(plans.upload_bundle(make_bundle(directory)))
        memo.remember(digest)
        return digest
