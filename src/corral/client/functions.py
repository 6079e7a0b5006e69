"""Python functions as jobs: the payload a task unpickles, the spec that runs it, and its results.

The function and its arguments are cloudpickled into a file of the job's bundle (beside the
working directory when one is shipped), so workers fetch them the way they fetch any bundle,
cached by digest. Each task runs `python -m corral.function` with its worker's interpreter and
stores an envelope of the return value or the exception; `results` waits for them.
"""

from __future__ import annotations

import io
import marshal
import os
import time
import types
from collections import ChainMap
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import cloudpickle

from corral.client.bundle import make_bundle
from corral.client.errors import CorralError
from corral.client.plans import API, Call, Plan, get, submit, upload_bundle
from corral.core.spec import JobSpec, Resources
from corral.core.states import TASK_TERMINAL
from corral.core.views import JobView
from corral.function import PAYLOAD

# The worker's own interpreter (CORRAL_PYTHON) has corral and cloudpickle: the task runs with it. A job with pip or
# python runs in its environment, whose CORRAL_PYTHON reaches them too (on the worker's Python version).
COMMAND = ["sh", "-c", 'exec "${CORRAL_PYTHON:-python3}" -m corral.function']
LONG_POLL = 20.0  # seconds the controller holds a result request open


class RemoteError(CorralError):
    """A function raised an exception that could not be brought back as itself (it did not unpickle)."""

    def __init__(self, type_name: str, message: str, remote_traceback: str) -> None:
        super().__init__(None, f"{type_name}: {message}\n\nremote traceback:\n{remote_traceback}")
        self.type_name = type_name
        self.remote_traceback = remote_traceback


class PayloadPickler(cloudpickle.Pickler):
    """cloudpickle, but code travels whole, as in a .pyc, with its file name: a remote traceback then names the
    user's file and line (cloudpickle 3.1.3 on calls every shipped function's file "<dynamic-code>")."""

    dispatch_table = ChainMap({types.CodeType: lambda code: (marshal.loads, (marshal.dumps(code),))},
                              cloudpickle.Pickler.dispatch_table)


def dumps_payload(value: Any) -> bytes:
    with io.BytesIO() as file:
        PayloadPickler(file).dump(value)
        return file.getvalue()


def function_spec(function: Callable, digest: str, resources: Resources | Mapping | None, replicas: int | None,
                  options: Mapping[str, Any] | None) -> JobSpec:
    taken = {"command", "bundle"} & set(options or {})
    if taken:
        raise TypeError(f"options cannot set {', '.join(sorted(taken))}: a function job runs its function "
                        "(use workdir= to ship a directory with it)")
    fields: dict[str, Any] = {"name": getattr(function, "__qualname__", None) or "function", **(options or {})}
    fields.update(command=COMMAND, bundle=digest)
    if resources is not None:
        fields["resources"] = resources
    if replicas is not None:
        fields["replicas"] = replicas
    return JobSpec.model_validate(fields)


def submit_function(function: Callable, args: tuple, kwargs: dict, *, resources: Resources | Mapping | None = None,
                    replicas: int | None = None, workdir: str | os.PathLike | None = None,
                    options: Mapping[str, Any] | None = None, idempotency_key: str | None = None,
                    pip: Sequence[str] | None = None, python: str | None = None) -> Plan[JobView]:
    if not callable(function):
        raise TypeError(f"submit takes a JobSpec, a dict or a function, not {type(function).__name__}")
    if isinstance(pip, str):
        raise TypeError("pip takes a list of items, e.g. pip=['numpy==2.1.*']")
    environment = {**({"pip": list(pip)} if pip else {}), **({"python": python} if python else {})}
    options = {**(options or {}), **environment}
    payload = dumps_payload((function, args, kwargs))
    bundle = make_bundle(workdir, extra={PAYLOAD: payload})
    spec = function_spec(function, "0" * 64, resources, replicas, options)  # fails fast, before the upload
    digest = yield from upload_bundle(bundle)
    return (yield from submit(spec.model_copy(update={"bundle": digest}), idempotency_key))


def results(job_id: int, replicas: int | None = None, timeout: float | None = None) -> Plan[list]:
    """Each task's return value, in task order; raises what the first failing task raised."""
    deadline = None if timeout is None else time.monotonic() + timeout
    if replicas is None:
        replicas = (yield from get(job_id)).replicas
    values = []
    for index in range(replicas):
        envelope = yield from _envelope(job_id, index, deadline)
        values.append(unwrap(envelope, job_id, index))
    return values


def _envelope(job_id: int, index: int, deadline: float | None) -> Plan[dict]:
    """The task's outcome; a failure only once the task has ended, since a failed attempt may be retried."""
    final = False
    while True:
        left = LONG_POLL if deadline is None else min(LONG_POLL, deadline - time.monotonic())
        if left <= 0:
            raise TimeoutError(f"task {index} of job {job_id} has no result yet")
        response = yield Call("GET", f"{API}/jobs/{job_id}/tasks/{index}/result",
                              params={"wait": round(left, 3), "final": final}, timeout=left + 30)
        if response.status_code == 202:
            continue
        envelope = _load(response.content, job_id, index)
        if "value" in envelope or response.headers.get("X-Corral-Task-State") in TASK_TERMINAL:
            return envelope
        final = True


def _load(data: bytes, job_id: int, index: int) -> dict:
    try:
        envelope = cloudpickle.loads(data)
    except Exception as error:
        raise CorralError(None, f"cannot unpickle the result of task {index} of job {job_id} here: {error!r} "
                                "(are the modules it needs importable in this process?)") from None
    if not isinstance(envelope, dict) or not ({"value", "traceback"} & envelope.keys()):
        raise CorralError(None, f"task {index} of job {job_id} stored something that is not a function result")
    return envelope


def unwrap(envelope: dict, job_id: int, index: int) -> Any:
    """The value, or the remote exception raised here with its remote traceback attached as a note."""
    if "value" in envelope:
        return envelope["value"]
    where = f"task {index} of job {job_id}"
    error = envelope.get("error")
    if isinstance(error, BaseException):
        error.remote_traceback = envelope["traceback"]  # type: ignore[attr-defined]
        error.add_note(f"raised in {where}; remote traceback:\n{envelope['traceback']}")
        raise error
    raise RemoteError(envelope.get("type", "Exception"), f"{envelope.get('message', '')} (in {where})",
                      envelope["traceback"])
