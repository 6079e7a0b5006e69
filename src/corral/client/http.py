"""The Python client of the controller's REST API: what the CLI uses, and what scripts can use."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import httpx
from pydantic import TypeAdapter

from corral.client.bundle import make_bundle
from corral.client.discovery import discover
from corral.client.errors import CorralError, format_detail
from corral.client.logs import follow_logs, read_logs
from corral.core.spec import JobSpec
from corral.core.states import JOB_TERMINAL, JobState
from corral.core.views import HistoryEntry, JobPage, JobView, PlacementAnalysis, TaskView, WorkerView

API = "/api/v1"
PAGE_SIZE = 500  # the controller accepts up to 1000

_tasks = TypeAdapter(list[TaskView])
_history = TypeAdapter(list[HistoryEntry])
_workers = TypeAdapter(list[WorkerView])


class Client:
    """A sync client; without `url`, finds the controller as `discover` does (env, then `corral up`'s data dir)."""

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        source = "the arguments"
        if url is None:
            endpoint = discover()
            url, token, source = endpoint.url, token or endpoint.token, endpoint.source
        self.url = url.rstrip("/")
        self._source = source
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout, transport=transport)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # transport ---------------------------------------------------------------------------

    def request(self, method: str, path: str, *, ok: Iterable[int] = (), **kwargs: Any) -> httpx.Response:
        """Send one request; any status >= 400 not in `ok` becomes a CorralError with the server's message."""
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as error:
            hint = "" if self._source in ("CORRAL_URL", "the arguments") else \
                f" (found in {self._source}; is `corral up` still running?)"
            raise CorralError(None, f"cannot reach the controller at {self.url}{hint}: {error}") from None
        if response.status_code >= 400 and response.status_code not in ok:
            raise CorralError(response.status_code, _message(response))
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.request(method, path, **kwargs).json()

    # jobs --------------------------------------------------------------------------------

    def submit(self, spec: JobSpec | dict, idempotency_key: str | None = None) -> JobView:
        """Validate locally first, so a bad spec fails with the field named before any network round trip."""
        spec = spec if isinstance(spec, JobSpec) else JobSpec.model_validate(spec)
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return JobView.model_validate(
            self._json("POST", f"{API}/jobs", json=spec.model_dump(mode="json"), headers=headers))

    def get(self, job_id: int) -> JobView:
        return JobView.model_validate(self._json("GET", f"{API}/jobs/{job_id}"))

    def list_page(self, states: Iterable[JobState | str] | None = None, limit: int = 100,
                  cursor: int | None = None) -> JobPage:
        params: dict[str, Any] = {"limit": limit, "state": [str(s) for s in states or ()]}
        if cursor is not None:
            params["cursor"] = cursor
        return JobPage.model_validate(self._json("GET", f"{API}/jobs", params=params))

    def list(self, states: Iterable[JobState | str] | None = None, limit: int | None = 100) -> Iterator[JobView]:
        """Jobs newest first, across pages, at most `limit` of them (None: all)."""
        states = list(states or ())
        cursor, left = None, limit
        while left is None or left > 0:
            page = self.list_page(states, min(PAGE_SIZE, left or PAGE_SIZE), cursor)
            items = page.items if left is None else page.items[:left]
            yield from items
            if left is not None:
                left -= len(items)
            if page.next_cursor is None or not page.items:
                return
            cursor = page.next_cursor

    def tasks(self, job_id: int) -> list[TaskView]:
        return _tasks.validate_python(self._json("GET", f"{API}/jobs/{job_id}/tasks"))

    def history(self, job_id: int) -> list[HistoryEntry]:
        return _history.validate_python(self._json("GET", f"{API}/jobs/{job_id}/history"))

    def placement(self, job_id: int) -> PlacementAnalysis:
        """The placement analysis: each worker, and why it can or cannot take a task of the job now."""
        return PlacementAnalysis.model_validate(self._json("GET", f"{API}/jobs/{job_id}/placement"))

    def cancel(self, job_id: int) -> JobView:
        return JobView.model_validate(self._json("POST", f"{API}/jobs/{job_id}/cancel"))

    def wait(self, job_id: int, timeout: float | None = None, poll: float = 0.2) -> JobView:
        """Poll until the job is terminal; TimeoutError after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.get(job_id)
            if job.state in JOB_TERMINAL:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} is still {job.state} after {timeout}s")
            time.sleep(poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic())))

    def logs(self, job_id: int, task: int = 0, stream: str = "stdout", attempt: int | None = None,
             follow: bool = False, poll: float = 0.5,
             on_attempt: Callable[[int], None] | None = None) -> Iterator[bytes]:
        """A task's log as byte chunks. With `follow`, keeps polling until the task ends and its log is drained;
        following the current attempt moves on to the next attempt of a retried task (`on_attempt` is told)."""
        if follow:
            return follow_logs(self, job_id, task, stream, attempt, poll, on_attempt)
        return read_logs(self, job_id, task, stream, attempt)

    def log_chunk(self, job_id: int, task: int, stream: str, attempt: int | None, offset: int) -> httpx.Response:
        params: dict[str, Any] = {"stream": stream, "offset": offset}
        if attempt is not None:
            params["attempt"] = attempt
        return self.request("GET", f"{API}/jobs/{job_id}/tasks/{task}/logs", params=params)

    # workers and bundles -----------------------------------------------------------------

    def workers(self) -> list[WorkerView]:
        return _workers.validate_python(self._json("GET", f"{API}/workers"))

    def upload_bundle(self, directory: str | os.PathLike) -> str:
        """Archive `directory` and upload it unless the controller has it already; returns its sha256."""
        data = make_bundle(directory)
        digest = hashlib.sha256(data).hexdigest()
        if self.request("HEAD", f"{API}/bundles/{digest}", ok=(404,)).status_code == 404:
            self.request("PUT", f"{API}/bundles/{digest}", content=data,
                         headers={"Content-Type": "application/gzip"})
        return digest


def _message(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    if detail is None:
        detail = response.text.strip() or response.reason_phrase or f"HTTP {response.status_code}"
    message = format_detail(detail)
    if response.status_code == 401:
        message += " (check CORRAL_TOKEN, or the data directory's cluster.json)"
    return message
