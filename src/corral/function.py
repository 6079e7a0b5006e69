"""Runs one task of a function job: `python -m corral.function`, in the task's working directory.

The payload (`PAYLOAD`: the cloudpickled function and its arguments) arrives in the job's
bundle. The outcome goes back to the controller as a pickled envelope, `{"value": ...}` or
`{"error": ..., "traceback": ...}`, stored per attempt; the exit code says which (0 or 1),
so the task's state tells the same story. Only the standard library and cloudpickle are
imported here: this process's start-up time is most of a small function's round trip.
"""

from __future__ import annotations

import http.client
import os
import sys
import time
import traceback
from urllib.parse import urlsplit

import cloudpickle

PAYLOAD = "__corral_function__.pkl"
UPLOAD_TRIES = 5


class ResultTooLarge(Exception):
    """The return value did not fit the controller's result limit."""


def error_envelope(error: BaseException) -> dict:
    """The exception itself when it pickles (so the caller can catch its type), else its type and message."""
    envelope = {"type": f"{type(error).__module__}.{type(error).__qualname__}", "message": str(error),
                "traceback": "".join(traceback.format_exception(error))}
    try:
        cloudpickle.dumps(error)
        envelope["error"] = error
    except Exception:
        envelope["error"] = None
    return envelope


def run(payload: bytes) -> dict:
    """Call the function; the envelope of its value or of what it raised."""
    try:
        function, args, kwargs = cloudpickle.loads(payload)
    except Exception as error:
        envelope = error_envelope(error)
        envelope["message"] = f"cannot unpickle the function on the worker: {error} (is the worker on the same " \
                              "Python version, with the modules the function imports?)"
        return envelope
    try:
        return {"value": function(*args, **kwargs)}
    except BaseException as error:  # noqa: B036  the caller gets whatever the function raised, SystemExit included
        assert error.__traceback__ is not None
        return error_envelope(error.with_traceback(error.__traceback__.tb_next))  # from the function's frame on


def encode(envelope: dict) -> bytes:
    try:
        return cloudpickle.dumps(envelope)
    except Exception as error:
        return cloudpickle.dumps(error_envelope(TypeError(f"the return value cannot be pickled: {error}")))


def upload(data: bytes, env: dict) -> int:
    """PUT the result; returns the HTTP status (413 when over the limit), 0 when the controller is unreachable.
    With several controllers in CORRAL_URL, each try goes to the next one (a PUT is safe to repeat)."""
    controllers = [urlsplit(url) for url in env["CORRAL_URL"].split(",")]
    path = (f"/api/v1/jobs/{env['CORRAL_JOB_ID']}/tasks/{env['CORRAL_TASK_INDEX']}/result"
            f"?attempt={env['CORRAL_ATTEMPT']}")
    headers = {"Authorization": f"Bearer {env['CORRAL_TOKEN']}", "Content-Type": "application/octet-stream"}
    for remaining in reversed(range(UPLOAD_TRIES)):
        url = controllers[(UPLOAD_TRIES - 1 - remaining) % len(controllers)]
        connection_type = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        connection = connection_type(url.hostname or "127.0.0.1", url.port, timeout=60)
        try:
            connection.request("PUT", path, body=data, headers=headers)
            response = connection.getresponse()
            body = response.read()
        except OSError as error:
            if not remaining:
                print(f"corral: cannot reach the controller to store the result: {error}", file=sys.stderr)
                return 0
            time.sleep(0.2 * (UPLOAD_TRIES - remaining))
            continue
        finally:
            connection.close()
        if response.status < 500 or not remaining:
            if response.status >= 300 and response.status != 413:
                print(f"corral: storing the result failed: HTTP {response.status} {body.decode(errors='replace')}",
                      file=sys.stderr)
            return response.status
    return 0


def main() -> int:
    with open(PAYLOAD, "rb") as handle:
        envelope = run(handle.read())
    data = encode(envelope)
    status = upload(data, os.environ)
    if status == 413:
        too_large = ResultTooLarge(f"the function's result is {len(data)} bytes pickled, over the controller's "
                                   "limit; write large outputs to shared storage and return their location")
        envelope = error_envelope(too_large)
        status = upload(encode(envelope), os.environ)
    if "traceback" in envelope:
        print(envelope["traceback"], file=sys.stderr, end="")
    return 0 if "value" in envelope and status < 300 and status else 1


if __name__ == "__main__":
    # Run as the importable module, so ResultTooLarge pickles by reference, not as a class of __main__.
    from corral.function import main as module_main

    sys.exit(module_main())
