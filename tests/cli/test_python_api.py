"""The Python API without a server: plans driven by both clients, function payloads, results, events."""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import tarfile
import traceback

import cloudpickle
import httpx
import pytest
from pydantic import ValidationError

import corral
from corral.client.aio import AsyncClient
from corral.client.errors import CorralError
from corral.client.functions import COMMAND, RemoteError, dumps_payload
from corral.client.http import Client
from corral.client.sse import EventParser
from corral.context import current
from corral.core.states import JOB_STATE_HEADER
from corral.function import PAYLOAD, encode, error_envelope
from tests.cli.conftest import job_view


def both(handler):
    """The same fake controller behind a sync and an async client."""
    return (Client("http://ctl:1", "tok", transport=httpx.MockTransport(handler)),
            AsyncClient("http://ctl:1", "tok", transport=httpx.MockTransport(handler)))


def run(coroutine):
    return asyncio.run(coroutine)


def test_the_package_exports_the_api():
    assert corral.Client is Client and corral.AsyncClient is AsyncClient and corral.current is current
    with pytest.raises(AttributeError):
        corral.Nope  # noqa: B018


def test_sync_and_async_clients_give_the_same_pages_waits_and_logs():
    states = iter(["RUNNING", "SUCCEEDED"] * 2)
    ended = {"id": 4, "job_id": 5, "task_id": None, "to_state": "SUCCEEDED"}
    log = b"0123456789"

    def handler(request):
        path = request.url.path
        if path == "/api/v1/jobs":
            cursor = request.url.params.get("cursor")
            ids, nxt = {None: ([9, 8], 8), "8": ([7], None)}[cursor]
            return httpx.Response(200, json={"items": [job_view(i).model_dump(mode="json") for i in ids],
                                             "next_cursor": nxt})
        if path == "/api/v1/events":
            return httpx.Response(200, text=f"id: 4\ndata: {json.dumps(ended)}\n\n")
        if path == "/api/v1/jobs/5":
            return httpx.Response(200, json=job_view(5, state=next(states)).model_dump(mode="json"))
        offset = int(request.url.params["offset"])
        return httpx.Response(200, content=log[offset:offset + 3], headers={
            "X-Corral-Attempt": "0", "X-Corral-Task-State": "RUNNING", "X-Corral-Log-Size": str(len(log))})

    sync, aio = both(handler)
    expected = ([j.id for j in sync.list(limit=None)], [j["id"] for j in sync.list_rows(limit=2)],
                sync.wait(5).state, b"".join(sync.logs(5)))

    async def scenario():
        async with aio:
            return ([j.id async for j in aio.list(limit=None)], [j["id"] async for j in aio.list_rows(limit=2)],
                    (await aio.wait(5)).state, b"".join([chunk async for chunk in aio.logs(5)]))

    assert expected == ([9, 8, 7], [9, 8], "SUCCEEDED", log)
    assert run(scenario()) == expected


def test_errors_name_the_problem_in_both_clients():
    sync, aio = both(lambda request: httpx.Response(401, json={"detail": "wrong token"}))
    with pytest.raises(CorralError, match="^authentication failed: wrong token") as raised:
        sync.get(1)
    with pytest.raises(CorralError, match="^authentication failed: wrong token") as raised_async:
        run(aio.get(1))
    assert raised.value.status == raised_async.value.status == 401


def test_a_function_is_shipped_as_a_bundle_holding_its_payload(tmp_path):
    (tmp_path / "data.txt").write_text("shipped")
    seen = {}

    def handler(request):
        if request.method == "HEAD":
            return httpx.Response(404)
        if request.method == "PUT":
            seen["bundle"] = request.content
            return httpx.Response(201, json={})
        seen["spec"] = json.loads(request.content)
        return httpx.Response(201, json=job_view(3).model_dump(mode="json"))

    sync, _ = both(handler)
    job = sync.submit(divmod, 7, 2, resources={"gpu": 1}, replicas=2, workdir=tmp_path,
                      options={"name": "div", "priority": 5})
    assert job.id == 3
    spec = seen["spec"]
    assert (spec["command"], spec["name"], spec["replicas"], spec["resources"]["gpu"], spec["priority"]) == (
        COMMAND, "div", 2, 1, 5)
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(seen["bundle"]))) as archive:
        assert sorted(archive.getnames()) == sorted([PAYLOAD, "data.txt"])
        function, args, kwargs = cloudpickle.loads(archive.extractfile(PAYLOAD).read())
    assert function(*args, **kwargs) == (3, 1)


def test_a_shipped_function_keeps_its_file_and_lines_for_the_remote_traceback():
    def outer(x):
        def inner():
            raise ValueError(x)
        return inner()

    function = cloudpickle.loads(dumps_payload(outer))  # by value: it is local to this test
    assert function.__code__.co_filename == __file__
    inner = next(c for c in function.__code__.co_consts if hasattr(c, "co_filename"))
    assert inner.co_filename == __file__
    with pytest.raises(ValueError) as raised:
        function("bad")
    assert "raise ValueError(x)" in "".join(traceback.format_exception(raised.value))


def test_a_spec_takes_no_function_options():
    sync, _ = both(lambda request: httpx.Response(500))
    with pytest.raises(TypeError, match="a job spec carries its own options"):
        sync.submit({"command": ["true"]}, replicas=2)
    with pytest.raises(TypeError, match="submit takes a JobSpec, a dict or a function"):
        sync.submit(42)
    with pytest.raises(TypeError, match="options cannot set command: a function job runs its function"):
        sync.submit(print, options={"command": ["true"]})


def result_server(responses):
    """Answers result requests from a script: (status, envelope or None, task state)."""
    script = iter(responses)
    asked = []

    def handler(request):
        if request.url.path == "/api/v1/jobs/4":
            return httpx.Response(200, json=job_view(4).model_dump(mode="json"))
        asked.append(request.url.params["final"])
        status, envelope, state = next(script)
        headers = {"X-Corral-Task-State": state, "X-Corral-Attempt": "0"}
        if status == 200:
            return httpx.Response(200, content=encode(envelope), headers=headers)
        return httpx.Response(status, json={"detail": f"task 0 of job 4 ended {state} without a result"},
                              headers=headers)

    return handler, asked


def failure(error):
    try:
        raise error
    except Exception as raised:
        return error_envelope(raised)


def test_a_result_is_waited_for_then_returned_by_both_clients():
    script = [(202, None, "RUNNING"), (200, {"value": {"a": 1}}, "RUNNING")]
    sync, _ = both(result_server(script)[0])
    _, aio = both(result_server(script)[0])
    assert sync.results(4) == [{"a": 1}] == run(aio.results(4))


def test_a_failure_is_raised_only_once_the_task_has_ended_since_it_may_be_retried():
    handler, asked = result_server([
        (200, failure(KeyError("first try")), "RUNNING"),  # stored while the attempt still exits
        (200, {"value": "second try"}, "SUCCEEDED"),  # the retry succeeded
    ])
    sync, _ = both(handler)
    assert sync.results(4) == ["second try"]
    assert asked == ["false", "true"]
    handler, _ = result_server([(200, failure(KeyError("for good")), "FAILED")])
    with pytest.raises(KeyError, match="for good") as raised:
        both(handler)[0].results(4)
    assert "KeyError" in raised.value.remote_traceback


def test_an_exception_that_does_not_unpickle_arrives_as_a_remote_error():
    class Local(Exception):
        def __reduce__(self):
            raise TypeError("no pickling")

    envelope = failure(Local("odd"))
    assert envelope["error"] is None
    handler, _ = result_server([(200, envelope, "FAILED")])
    with pytest.raises(RemoteError, match="Local: odd") as raised:
        both(handler)[0].results(4)
    assert "raise error" in raised.value.remote_traceback


def test_a_task_that_ended_without_a_result_is_an_error_naming_it():
    handler, _ = result_server([(404, None, "KILLED")])
    with pytest.raises(CorralError, match="task 0 of job 4 ended KILLED without a result"):
        both(handler)[0].results(4)


def test_the_event_parser_follows_the_format():
    parser = EventParser()
    lines = [": keep-alive", "id: 7", "event: job", 'data: {"job": 1,', 'data: "state": "RUNNING"}', "",
             "data: plain text", "", "id: 8", ""]
    events = [e for e in map(parser.feed, lines) if e is not None]
    assert [(e.id, e.type, e.data) for e in events] == [
        ("7", "job", {"job": 1, "state": "RUNNING"}), ("7", "message", "plain text")]
    assert parser.last_id == "8"


def sse_server():
    """A fake event stream that drops after two events; the reconnection must resume after the last id."""
    connections = []

    def handler(request):
        resume = request.headers.get("last-event-id")
        assert request.url.params.get("after") == resume
        connections.append((request.url.params.get("job"), resume))
        start = int(resume or 0) + 1
        body = "".join(f'id: {i}\nevent: job\ndata: {{"n": {i}}}\n\n' for i in range(start, start + 2))
        return httpx.Response(200, content=body.encode(), headers={"Content-Type": "text/event-stream"})

    return handler, connections


def test_events_resume_from_the_last_id_in_both_clients():
    handler, connections = sse_server()
    sync, _ = both(handler)
    stream = sync.events(job=5)
    got = [next(stream).data["n"] for _ in range(3)]
    assert got == [1, 2, 3]
    assert connections == [("5", None), ("5", "2")]

    handler, connections = sse_server()
    _, aio = both(handler)

    async def scenario():
        stream = aio.events(job=5, last_event_id="10")
        return [(await anext(stream)).data["n"] for _ in range(3)]

    assert run(scenario()) == [11, 12, 13]
    assert connections == [("5", "10"), ("5", "12")]


def test_a_controller_without_an_event_stream_says_so():
    sync, _ = both(lambda request: httpx.Response(404, json={"detail": "Not Found"}))
    with pytest.raises(CorralError, match=r"this controller has no event stream \(/api/v1/events\)"):
        next(sync.events())


def test_current_outside_and_inside_a_task():
    with pytest.raises(RuntimeError, match="not inside a corral task: CORRAL_JOB_ID"):
        current({})
    here = current({"CORRAL_JOB_ID": "4", "CORRAL_TASK_INDEX": "1", "CORRAL_NUM_TASKS": "2", "CORRAL_ATTEMPT": "0",
                    "CORRAL_URL": "http://ctl:1/", "CORRAL_TOKEN": "cj_4_x"})
    assert (here.job_id, here.task_index, here.num_tasks, here.attempt, here.url) == (4, 1, 2, 0, "http://ctl:1")
    assert "cj_4_x" not in repr(here)


def test_remote_functions_run_locally_and_submit_with_their_options():
    submitted = []

    class Recorder:
        def submit(self, function, *args, **kwargs):
            submitted.append((function, args, kwargs))

    @corral.remote(gpus=1, cpus=2, replicas=4, time_limit="1h")
    def train(lr, epochs=1):
        return lr * epochs

    assert train(0.5, epochs=2) == 1.0 and train.__name__ == "train"
    train.options(gpus=2, gpu_memory="40G").submit(0.1, epochs=3, client=Recorder())
    function, args, kwargs = submitted[0]
    assert function is train.function and args == (0.1,)
    assert kwargs == {"resources": {"gpu": 2, "cpu": 2, "gpu_memory": "40G"}, "replicas": 4, "workdir": None,
                      "options": {"time_limit": "1h"}, "epochs": 3}


def test_the_client_and_remote_functions_ask_for_a_share_of_one_gpu_and_refuse_a_bad_one(tmp_path):
    sent = []

    def handler(request):
        if request.method == "HEAD":
            return httpx.Response(404)
        if request.method == "PUT":
            return httpx.Response(201, json={})
        sent.append(json.loads(request.content)["resources"])
        return httpx.Response(201, json=job_view(3).model_dump(mode="json"))

    sync, aio = both(handler)
    sync.submit({"command": ["serve"], "resources": {"gpu": 0.25, "gpu_memory": "10G"}})
    run(aio.submit(divmod, 7, 2, resources={"gpu": "0.5"}, workdir=tmp_path))
    corral.remote(gpus=0.75)(divmod).submit(7, 2, client=sync)
    assert [(r["gpu"], r.get("gpu_memory")) for r in sent] == [(0.25, 10 * 10**9), (0.5, None), (0.75, None)]
    for bad in (0.333, 1.5, -1, "half"):
        with pytest.raises(ValueError, match="resources.gpu"):
            sync.submit(divmod, 7, 2, resources={"gpu": bad}, workdir=tmp_path)
    assert len(sent) == 3


class Dropping(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A body that sends `chunks`, then breaks off as a dropped connection does."""

    def __init__(self, chunks):
        self.chunks = chunks

    def __iter__(self):
        yield from self.chunks
        raise httpx.ReadError("connection reset")

    async def __aiter__(self):
        for chunk in self.chunks:
            yield chunk
        raise httpx.ReadError("connection reset")


def test_both_clients_resume_a_stream_dropped_mid_event_before_that_event():
    def server():
        resumed = []

        def handler(request):
            resume = request.headers.get("last-event-id")
            resumed.append(resume)
            if resume is None:
                body = [b'id: 1\ndata: {"n": 1}\n\n', b'id: 2\ndata: {"n"']
            else:
                body = [f'id: {i}\ndata: {{"n": {i}}}\n\n'.encode() for i in range(int(resume) + 1, int(resume) + 3)]
            return httpx.Response(200, stream=Dropping(body), headers={"Content-Type": "text/event-stream"})
        return handler, resumed

    handler, resumed = server()
    stream = both(handler)[0].events()
    assert [next(stream).data["n"] for _ in range(3)] == [1, 2, 3]
    assert resumed == [None, "1"]

    handler, resumed = server()

    async def scenario():
        stream = both(handler)[1].events()
        return [(await anext(stream)).data["n"] for _ in range(3)]

    assert run(scenario()) == [1, 2, 3]
    assert resumed == [None, "1"]


def test_a_stream_read_without_follow_ends_once_caught_up_and_a_drop_is_an_error():
    def handler(request):
        assert request.url.params["follow"] == "false" and request.url.params["deployment"] == "svc"
        return httpx.Response(200, content=b'id: 1\ndata: {"n": 1}\n\n', headers={"Content-Type": "text/event-stream"})

    assert [e.data["n"] for e in both(handler)[0].events(deployment="svc", follow=False)] == [1]
    dropping = both(lambda request: httpx.Response(200, stream=Dropping([b"id: 1\n"])))[0]
    with pytest.raises(CorralError, match="cannot reach the controller at http://ctl:1.*connection reset"):
        list(dropping.events(follow=False))


def test_submit_many_is_one_call_from_both_clients_and_a_bad_spec_never_leaves():
    bodies = []

    def handler(request):
        assert (request.method, request.url.path) == ("POST", "/api/v1/jobs/batch")
        body = json.loads(request.content)
        bodies.append(body)
        return httpx.Response(201, json=[job_view(10 + i).model_dump(mode="json") for i in range(len(body["jobs"]))])

    sync, aio = both(handler)
    specs = [{"command": ["a"]}, {"command": ["b"], "max_running": 2, "replicas": 4}]
    assert [v.id for v in sync.submit_many(specs, idempotency_keys=["x", None])] == [10, 11]
    assert [v.id for v in run(aio.submit_many(specs))] == [10, 11]
    sent = [{"name": "a", "command": ["a"]}, {"name": "b", "command": ["b"], "replicas": 4, "max_running": 2}]
    assert bodies == [{"jobs": sent, "idempotency_keys": ["x", None]}, {"jobs": sent}]
    for bad, kwargs in [([], {}), ([{"command": []}], {}), ([{"command": ["a"]}] * 1001, {}),
                        (specs, {"idempotency_keys": ["only-one"]})]:
        with pytest.raises(ValidationError):
            sync.submit_many(bad, **kwargs)
    assert len(bodies) == 2


def test_both_clients_follow_a_stream_that_names_its_job_active_without_reading_the_job():
    """The job read here says it ended; a client that asked it at the open would return it. The stream names the
    job RUNNING and never ends it, so a client that trusts the header waits out its timeout, reading no job."""
    read: list[str] = []

    def handler(request):
        if request.url.path == "/api/v1/events":
            return httpx.Response(200, text="retry: 10\n\n", headers={JOB_STATE_HEADER: "RUNNING"})
        read.append(request.url.path)
        return httpx.Response(200, json=job_view(5, state="SUCCEEDED").model_dump(mode="json"))

    sync, aio = both(handler)
    with pytest.raises(TimeoutError):
        sync.wait(5, timeout=0.3)
    with pytest.raises(TimeoutError):
        run(aio.wait(5, timeout=0.3))
    assert read == []


def test_both_clients_answer_at_once_with_a_job_the_stream_names_ended():
    def handler(request):
        if request.url.path == "/api/v1/events":
            return httpx.Response(200, text="retry: 10\n\n", headers={JOB_STATE_HEADER: "FAILED"})
        return httpx.Response(200, json=job_view(5, state="FAILED").model_dump(mode="json"))

    for client in both(handler):
        waited = client.wait(5, timeout=5)
        assert (run(waited) if asyncio.iscoroutine(waited) else waited).state == "FAILED"
