"""The sync Python client of the controller's REST API: what the CLI uses, and what scripts can use.

Every operation is a plan from `plans` (or `functions`, `logs`); this class only sends its
requests, sleeps its pauses and hands out its items. `AsyncClient` drives the same plans.

What only some operations need (functions and their bundles, the relay into tasks) is imported by
them, so a CLI command that lists jobs does not load it.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, closing, contextmanager
from functools import cached_property
from typing import TYPE_CHECKING, Any, overload

from corral.client import logs, plans, sse, teams
from corral.client.discovery import discover
from corral.client.errors import CorralError, Unanswered, format_detail
from corral.client.plain import PlainSession, plain_and_direct
from corral.client.plans import Call, Item, NextLine, Open, Plan, Sleep, advance, returning
from corral.client.sse import EVENTS_PATH, RECONNECTS, Event, follow_events
from corral.core.failover import Rotation, parse_urls
from corral.core.states import JobState

if TYPE_CHECKING:  # the models, imported by the plans that read them: `corral jobs` loads no pydantic
    import httpx

    from corral.client.httpx_session import HttpxSession
    from corral.client.jobs import FunctionJob
    from corral.client.plain import PlainResponse
    from corral.client.relay import ExecResult, Relay
    from corral.core.spec import JobSpec, Resources, Workdir
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

    Response = PlainResponse | httpx.Response  # an answer, from either session


def endpoint(url: str | None, token: str | None) -> tuple[Rotation, str | None, str]:
    """(the controllers, token, where they were found); without `url`, as `discover` finds them (env, login, data
    dir). `url` may name several controllers of one database, comma-separated."""
    if url is None:
        found = discover()
        url, token, source = found.url, token or found.token, found.source
    else:
        source = "the arguments"
    try:
        return Rotation(parse_urls(url)), token, source
    except ValueError as error:
        raise CorralError(None, f"{error} (from {source})") from None


RESENT_STATUSES = frozenset({502, 503, 504})  # a proxy's or a controller's "not now": the next one may answer
READS = frozenset({"GET", "HEAD", "OPTIONS"})


def resendable(method: str, headers: Mapping[str, str] | None, error: Exception | None) -> bool:
    """Whether a request that failed (`error`, or a RESENT_STATUSES answer when None) may go to another controller:
    one never sent may; else a read may, and a write only with an Idempotency-Key (a lost answer may hide a
    commit, which the key makes the controller answer again rather than do again)."""
    if isinstance(error, Unanswered) and not error.sent:
        return True
    return method.upper() in READS or any(name.lower() == "idempotency-key" for name in headers or {})


def fail_over(controllers: Rotation, url: str, tries: int, method: str, headers: Mapping[str, str] | None,
              error: Exception | None) -> bool:
    """After a request to `url` failed: move on to the next controller (sticky: it stays in use until it fails in
    turn), and say whether to send the request again there (once to each controller at most)."""
    controllers.failed(url)
    return tries < len(controllers.urls) and resendable(method, headers, error)


def try_again(controllers: Rotation, source: str, url: str, tries: int, method: str, kwargs: Mapping[str, Any],
              response: Response | None, error: Unanswered | None) -> bool:
    """After one try of a request at `url`: whether to send it again, to the controller now in use (`fail_over`);
    False when `response` is its answer. No answer that may not go elsewhere raises `unreachable`."""
    if error is not None:
        if fail_over(controllers, url, tries, method, kwargs.get("headers"), error):
            return True
        raise unreachable(url, source, error) from None
    return response.status_code in RESENT_STATUSES and fail_over(controllers, url, tries, method,
                                                                  kwargs.get("headers"), None)


def checked(response: Response, ok: Iterable[int]) -> Response:
    """The answer, or a CorralError with the server's message for a status >= 400 not in `ok`."""
    if response.status_code >= 400 and response.status_code not in ok:
        raise CorralError(response.status_code, message(response), detail_of(response))
    return response


def unreachable(url: str, source: str, error: Exception) -> CorralError:
    hint = "" if source in ("CORRAL_URL", "the arguments") else \
        f" (found in {source}; is `corral up` still running?)" if source.endswith("cluster.json") else \
        f" (found in {source}, which `corral login` wrote)"
    return CorralError(None, f"cannot reach the controller at {url}{hint}: {error}")


class Client:
    """A sync client; without `url`, finds the controller as `discover` does (env, login, `corral up`'s data dir)."""

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self._controllers, self._token, self._source = endpoint(url, token)
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        self._http: PlainSession | HttpxSession
        if transport is None and plain_and_direct(self._controllers.urls):
            self._http = PlainSession(headers, timeout)
        else:
            from corral.client.httpx_session import HttpxSession, tls_verification

            self._http = HttpxSession(headers, timeout, transport, tls_verification(self._controllers.urls))

    @property
    def url(self) -> str:
        """The controller in use (of several, the one that answered last)."""
        return self._controllers.current

    @cached_property
    def relay(self) -> Relay:
        """The channels into running tasks (terminals, exec, ports)."""
        from corral.client.relay import Relay

        return Relay(self.url, self._token)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # driving plans -----------------------------------------------------------------------

    def request(self, method: str, path: str, *, ok: Iterable[int] = (), **kwargs: Any) -> Response:
        """Send one request; any status >= 400 not in `ok` becomes a CorralError with the server's message. One that
        finds its controller away goes to the next one, when `resendable` allows."""
        for tries in itertools.count(1):
            url, response, error = self.url, None, None
            try:
                response = self._http.request(method, url + path, **kwargs)
            except Unanswered as failed:
                error = failed
            if not try_again(self._controllers, self._source, url, tries, method, kwargs, response, error):
                return checked(response, ok)

    @contextmanager
    def stream(self, method: str, path: str, read_timeout: float | None = None,
               **kwargs: Any) -> Iterator[Response]:
        """A response read as it arrives, with no read timeout unless given (streams stay quiet between events)."""
        url = self.url
        try:
            with self._http.stream(method, url + path, read_timeout, **kwargs) as response:
                if response.status_code >= 400:
                    response.read()
                    if response.status_code in RESENT_STATUSES:
                        self._controllers.failed(url)
                    raise CorralError(response.status_code, message(response, path))
                yield response
        except Unanswered as error:
            self._controllers.failed(url)
            raise unreachable(url, self._source, error) from None

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.request(method, path, **kwargs).json()

    def _send(self, call: Call) -> Response:
        kwargs = dict(call.kwargs)
        if call.timeout is not None:
            kwargs["timeout"] = call.timeout
        return self.request(call.method, call.path, ok=call.ok, **kwargs)

    def _run(self, plan: Plan) -> Any:
        """Drives an operation's plan to its result; a stream it reads on its way is closed when it returns."""
        with closing(self._iterate(returning(plan))) as result:
            return next(result)

    def _iterate(self, plan: Plan) -> Iterator:
        """Drives an iterating plan; the stream it opened (if any) is closed when it ends or is abandoned."""
        with ExitStack() as opened:
            lines: Iterator[str] | None = None
            reply: Any = None
            failure: CorralError | None = None
            while (step := advance(plan, reply, failure)) is not None:
                reply, failure = None, None
                if isinstance(step, Item):
                    yield step.value
                elif isinstance(step, Open):
                    opened.close()
                    try:
                        response = opened.enter_context(self.stream(step.call.method, step.call.path,
                                                                    step.call.timeout, **step.call.kwargs))
                        lines, reply = response.iter_lines(), response.headers
                    except CorralError as error:
                        failure = error
                elif isinstance(step, NextLine):
                    url = self.url
                    try:
                        reply = next(lines, None) if lines is not None else None
                    except Unanswered as error:
                        self._controllers.failed(url)
                        failure = unreachable(url, self._source, error)
                    if reply is None:
                        opened.close()
                else:
                    reply = self._step(step)

    def _step(self, step: Call | Sleep) -> Response | None:
        if isinstance(step, Sleep):
            time.sleep(step.seconds)
            return None
        return self._send(step)

    # jobs --------------------------------------------------------------------------------

    @overload
    def submit(self, target: JobSpec | dict, *, idempotency_key: str | None = None) -> JobView: ...

    @overload
    def submit(self, target: Callable, *args: Any, resources: Resources | Mapping | None = None,
               replicas: int | None = None, workdir: str | os.PathLike | None = None,
               options: Mapping[str, Any] | None = None, idempotency_key: str | None = None,
               pip: Sequence[str] | None = None, python: str | None = None,
               **kwargs: Any) -> FunctionJob: ...

    def submit(self, target, *args, resources=None, replicas=None, workdir=None, options=None, pip=None, python=None,
               idempotency_key=None, **kwargs):
        """Submit a job spec (returns its JobView), or a function to run as a job (returns a FunctionJob).

        A function is shipped with `args` and `kwargs` (cloudpickle), with `workdir` as its bundle when
        given; `resources` and `replicas` size it, `pip` and `python` give it a Python environment of its
        own (built by the worker: the function runs in it), `options` sets any other JobSpec field (name,
        env, priority, max_retries_failure, time_limit, ...).
        """
        from corral.core.spec import JobSpec

        if isinstance(target, JobSpec | dict):
            if args or kwargs or resources or replicas or workdir or options or pip or python:
                raise TypeError("a job spec carries its own options: pass only idempotency_key with it")
            return self._run(plans.submit(target, idempotency_key))
        from corral.client import functions
        from corral.client.jobs import FunctionJob

        view = self._run(functions.submit_function(
            target, args, kwargs, resources=resources, replicas=replicas, workdir=workdir, options=options,
            pip=pip, python=python, idempotency_key=idempotency_key))
        return FunctionJob(self, view)

    def submit_many(self, specs: Iterable[JobSpec | dict], *,
                    idempotency_keys: Iterable[str | None] | None = None) -> list[JobView]:
        """Submit many job specs in one call (at most MAX_BATCH): all are stored, or none; their JobViews in
        order. `idempotency_keys`: one per spec, None for none."""
        return self._run(plans.submit_many(specs, idempotency_keys))

    def submit_rows(self, specs: Sequence[Mapping[str, Any]], idempotency_keys: Sequence[str | None] | None = None,
                    *, batch: bool = False, shared_workdir: bool = False) -> list[dict[str, Any]]:
        """Submit job specs as written, unvalidated here: the controller checks them (a CorralError with status
        422 names the field, its `detail` each error). One submission, or with `batch` one call for all (all
        stored, or none). The jobs as the controller's JSON objects: `corral submit` builds no model.
        `shared_workdir`: see `plans.post_specs`."""
        return self._run(plans.post_specs(specs, idempotency_keys, batch=batch, shared_workdir=shared_workdir))

    def get(self, job_id: int) -> JobView:
        return self._run(plans.get(job_id))

    def list_page(self, states: Iterable[JobState | str] | None = None, limit: int = 100,
                  cursor: int | None = None, launched_by: int | None = None, owner: str | None = None,
                  project: str | None = None) -> JobPage:
        return self._run(plans.list_page(states, limit, cursor, launched_by, owner, project))

    def list(self, states: Iterable[JobState | str] | None = None, limit: int | None = 100,
             launched_by: int | None = None, owner: str | None = None, project: str | None = None) -> Iterator[JobView]:
        """Jobs newest first, across pages, at most `limit` of them (None: all); `launched_by`: a job's children,
        `owner`: a user's jobs, `project`: a project's."""
        return self._iterate(plans.list_jobs(states, limit, launched_by, owner, project))

    def list_rows(self, states: Iterable[JobState | str] | None = None, limit: int | None = 100,
                  launched_by: int | None = None, owner: str | None = None,
                  project: str | None = None) -> Iterator[dict[str, Any]]:
        """As `list`, each job as the controller's JSON object, not validated: for a listing that reads a few
        fields, which then loads no model (pydantic and the spec's models are a third of `corral jobs`)."""
        return self._iterate(plans.list_jobs(states, limit, launched_by, owner, project, rows=True))

    def count(self, states: Iterable[JobState | str] | None = None, launched_by: int | None = None,
              owner: str | None = None, project: str | None = None) -> int:
        """How many jobs are in `states` (any state if none), launched by a job, of an owner or of a project."""
        return self._run(plans.count_jobs(states, launched_by, owner, project))

    def tasks(self, job_id: int) -> list[TaskView]:
        return self._run(plans.tasks(job_id))

    def history(self, job_id: int) -> list[HistoryEntry]:
        return self._run(plans.history(job_id))

    def attempts(self, job_id: int) -> list[RetryAttemptView]:
        """The job's retry chain, oldest first: each job's state and failure cause."""
        return self._run(plans.attempts(job_id))

    def placement(self, job_id: int) -> PlacementAnalysis:
        """The placement analysis: each worker, and why it can or cannot take a task of the job now."""
        return self._run(plans.placement(job_id))

    def what_if(self, job_id: int) -> WhatIfView:
        """A pending job's start estimate, and the smallest changes that would start it sooner (a 409 if it is not
        pending)."""
        return self._run(plans.what_if(job_id))

    def cancel(self, job_id: int) -> JobView:
        return self._run(plans.cancel(job_id))

    def wait(self, job_id: int, timeout: float | None = None) -> JobView:
        """The job once it is terminal, as soon as its event says so; TimeoutError after `timeout` seconds."""
        return self._run(sse.wait(job_id, timeout))

    def wait_row(self, job_id: int, timeout: float | None = None) -> dict[str, Any]:
        """As `wait`, the job as the controller's JSON object."""
        return self._run(sse.wait(job_id, timeout, rows=True))

    def results(self, job_id: int, timeout: float | None = None) -> list:
        """A function job's return values, one per task in order; raises what the first failed task raised."""
        from corral.client import functions

        return self._run(functions.results(job_id, None, timeout))

    def logs(self, job_id: int, task: int = 0, stream: str = "stdout", attempt: int | None = None,
             follow: bool = False, poll: float = 0.5,
             on_attempt: Callable[[int], None] | None = None) -> Iterator[bytes]:
        """A task's log as byte chunks. With `follow`, keeps polling until the task ends and its log is drained;
        following the current attempt moves on to the next attempt of a retried task (`on_attempt` is told)."""
        if follow:
            return self._iterate(logs.follow_logs(job_id, task, stream, attempt, poll, on_attempt))
        return self._iterate(logs.read_logs(job_id, task, stream, attempt))

    def events(self, job: int | None = None, last_event_id: str | None = None, *, deployment: str | None = None,
               last: int | None = None, follow: bool = True, reconnects: int | None = RECONNECTS) -> Iterator[Event]:
        """The controller's event stream (server-sent events), of one job or one deployment if asked; a dropped
        stream is resumed after the last id seen (`reconnects` times in a row, None: forever). Without `follow`,
        it ends once caught up."""
        return self._iterate(follow_events({"job": job, "deployment": deployment, "last": last}, last_event_id,
                                           follow, reconnects))

    # reaching into running tasks (corral.core.relay) -------------------------------------

    def exec(self, job_id: int, command: Sequence[str], *, task: int = 0, stdin: bytes = b"") -> ExecResult:
        """Run `command` in a running task's environment (its directory, environment and devices), feed it
        `stdin`, and return its exit code and output once it exits."""
        import asyncio

        from corral.client.relay import capture_exec

        async def run() -> ExecResult:
            async with self.relay.exec(job_id, command, task) as channel:
                return await capture_exec(channel, stdin)

        return asyncio.run(run())

    @contextmanager
    def port_forward(self, job_id: int, remote_port: int, *, local_port: int = 0, task: int = 0,
                     address: str = "127.0.0.1") -> Iterator[tuple[str, int]]:
        """`with client.port_forward(job, 8888) as (host, port):` connections to host:port reach port 8888 of
        the task, each through a channel of its own, while the block runs (local_port 0: any free port)."""
        from corral.client.relay import PortForwarder, forwarding_in_background

        forwarder = PortForwarder(self.relay, job_id, remote_port, task=task, address=address, local_port=local_port)
        with forwarding_in_background(forwarder) as bound:
            yield bound

    def attachments(self, job_id: int) -> list[dict[str, Any]]:
        """Who attached to, exec'd in or forwarded a port of the job's tasks: open channels and recent ones."""
        return self._run(plans.attachments(job_id))

    # users, members and tokens (corral.core.roles) -----------------------------------------

    def whoami(self) -> dict[str, Any]:
        """Who this client's token acts as: name, role, projects and the token's kind and expiry."""
        return self._run(teams.whoami())

    def create_user(self, name: str, *, cluster_admin: bool = False, unix_user: str | None = None,
                    projects: Mapping[str, str] | None = None) -> dict[str, Any]:
        """A new user (cluster admins only), with its role in each of `projects` ({project: role})."""
        return self._run(teams.create_user(name, cluster_admin, unix_user, projects))

    def users(self) -> list[dict[str, Any]]:
        return self._run(teams.users())

    def user(self, name: str) -> dict[str, Any]:
        return self._run(teams.user(name))

    def update_user(self, name: str, **changes: Any) -> dict[str, Any]:
        """Changes cluster_admin, unix_user (None: none) or disabled; only the fields given."""
        return self._run(teams.update_user(name, changes))

    def set_member(self, project: str, name: str, role: str) -> dict[str, Any]:
        """Adds `name` to `project` with `role` (project-admin, member, viewer), or changes its role."""
        return self._run(teams.set_member(project, name, role))

    def remove_member(self, project: str, name: str) -> None:
        self._run(teams.remove_member(project, name))

    def members(self, project: str) -> list[dict[str, Any]]:
        return self._run(teams.members(project))

    def create_token(self, name: str | None = None, *, expires_in: int | None = None,
                     user: str | None = None) -> dict[str, Any]:
        """A personal token, valid `expires_in` seconds (None: until revoked); `token` in the answer is shown once."""
        return self._run(teams.create_token(name, expires_in, user))

    def tokens(self, user: str | None = None) -> list[dict[str, Any]]:
        return self._run(teams.tokens(user))

    def revoke_token(self, token_id: int) -> None:
        """Revokes a personal token: the controller refuses it from the next request on."""
        self._run(teams.revoke_token(token_id))

    # workers and bundles -----------------------------------------------------------------

    def workers(self) -> list[WorkerView]:
        return self._run(plans.workers())

    def controllers(self) -> list[ControllerView]:
        """The controllers serving the store, live or gone, and when each last ran each handler."""
        return self._run(plans.controllers())

    def estimate_stats(self, days: float = 30.0) -> EstimateStats:
        """How right the start estimates of jobs started in the last `days` were, by how far ahead they were made."""
        return self._run(plans.estimate_stats(days))

    def usage(self, since: str | None = None, until: str | None = None, by: str = "project") -> UsageReport:
        """Usage and cost over [since, until] (default: the last 30 days) by project, user or pool."""
        return self._run(plans.usage(since, until, by))

    def healthy(self, timeout: float = 1.0) -> bool:
        """Whether the controller is up and answers its health check within `timeout` seconds."""
        try:
            return self._run(plans.healthz(timeout))
        except CorralError:
            return False

    def workdir_sharing(self, workdir: Workdir, pool: str = "default") -> WorkdirSharing:
        """How many alive workers of `pool` share the directory, to tell whether its files must be uploaded."""
        return self._run(plans.workdir_sharing(workdir, pool))

    def upload_needed(self, workdir: Mapping[str, str], pool: str = "default") -> bool:
        """As `workdir_sharing(...).upload_needed`, for a Workdir's fields (path, filesystem), with no model."""
        return self._run(plans.workdir_sharing(workdir, pool, rows=True))["upload_needed"]

    def upload_bundle(self, directory: str | os.PathLike) -> str:
        """Archive `directory` and upload it unless the controller has it already; returns its sha256.
        A tree unchanged since its last upload is not even archived (TreeMemo)."""
        from corral.client.bundle import TreeMemo, make_bundle

        memo = TreeMemo(directory)
        known = memo.digest()
        if known is not None and self._run(plans.has_bundle(known)):
            return known
        digest = self._run(plans.upload_bundle(make_bundle(directory)))
        memo.remember(digest)
        return digest


def detail_of(response: Response) -> object:
    """The server's `detail` (FastAPI's: a string, or for a 422 a list of pydantic errors); None if it sent none."""
    try:
        return response.json().get("detail")
    except (ValueError, AttributeError):
        return None


def message(response: Response, path: str = "") -> str:
    """The server's `detail` for a request to `path`, as a sentence; a 401 says where the token came from."""
    detail = detail_of(response)
    if detail is None:
        detail = response.text.strip() or response.reason_phrase or f"HTTP {response.status_code}"
    text = format_detail(detail)
    if response.status_code == 401:
        text = (f"authentication failed: {text} "
                "(check CORRAL_TOKEN, `corral login`, or the data directory's cluster.json)")
    elif response.status_code == 404 and path == EVENTS_PATH and detail == "Not Found":
        text = f"this controller has no event stream ({EVENTS_PATH}): {text}"
    return text
