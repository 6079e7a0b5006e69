"""The client against a fake controller (httpx.MockTransport): no server needed."""

import hashlib
import json

import httpx
import pytest

from corral.client.errors import CorralError
from corral.client.http import Client
from tests.cli.conftest import job_view


def client_for(handler) -> Client:
    return Client("http://ctl:1", "tok", transport=httpx.MockTransport(handler))


def test_a_422_lists_each_field_and_message():
    detail = [{"loc": ["body", "resources", "cpu"], "msg": "Input should be less than or equal to 4096",
               "type": "x"},
              {"loc": ["body", "command"], "msg": "Value error, command is empty: give the program to run"}]
    api = client_for(lambda request: httpx.Response(422, json={"detail": detail}))
    with pytest.raises(CorralError) as raised:
        api.get(1)
    assert raised.value.status == 422
    assert str(raised.value) == ("resources.cpu: Input should be less than or equal to 4096; "
                                 "command: command is empty: give the program to run")


def test_a_string_detail_is_the_message_and_the_token_is_sent():
    seen = []

    def handler(request):
        seen.append(request.headers["authorization"])
        return httpx.Response(404, json={"detail": "no job 9"})

    with pytest.raises(CorralError, match="^no job 9$"):
        client_for(handler).get(9)
    assert seen == ["Bearer tok"]


def test_an_unreachable_controller_is_named():
    def handler(request):
        raise httpx.ConnectError("refused")

    with pytest.raises(CorralError, match="cannot reach the controller at http://ctl:1"):
        client_for(handler).workers()


def test_submit_sends_the_idempotency_key():
    def handler(request):
        assert request.headers["idempotency-key"] == "K"
        return httpx.Response(201, json=job_view(5, state="PENDING").model_dump(mode="json"))

    assert client_for(handler).submit({"command": ["true"]}, idempotency_key="K").id == 5


def test_list_follows_cursors_and_stops_at_the_limit():
    pages = {None: ([30, 29], 29), "29": ([28, 27], 27), "27": ([26], None)}
    asked = []

    def handler(request):
        cursor = request.url.params.get("cursor")
        asked.append((cursor, request.url.params.get_list("state")))
        ids, nxt = pages[cursor]
        return httpx.Response(200, json={"items": [job_view(i).model_dump(mode="json") for i in ids],
                                         "next_cursor": nxt})

    api = client_for(handler)
    assert [j.id for j in api.list(states=["RUNNING"], limit=None)] == [30, 29, 28, 27, 26]
    assert asked[0] == (None, ["RUNNING"])
    asked.clear()
    assert [j.id for j in api.list(limit=3)] == [30, 29, 28]
    assert len(asked) == 2


def test_logs_read_to_the_stored_size_then_stop():
    log = b"x" * 10

    def handler(request):
        offset = int(request.url.params["offset"])
        return httpx.Response(200, content=log[offset:offset + 4], headers={
            "X-Corral-Attempt": "0", "X-Corral-Task-State": "RUNNING", "X-Corral-Log-Size": str(len(log))})

    assert b"".join(client_for(handler).logs(1)) == log


def test_follow_drains_the_old_attempt_then_reads_the_new_one_until_the_task_ends():
    logs = {0: b"first\n", 1: b""}
    calls = {"n": 0}

    def handler(request):
        calls["n"] += 1
        current = 0 if calls["n"] < 3 else 1
        if calls["n"] == 3:
            logs[0] += b"late\n"  # reaches the controller as the retry begins: must still be read
        if calls["n"] >= 5:
            logs[1] = b"second\n"
        attempt = int(request.url.params.get("attempt", current))
        offset = int(request.url.params["offset"])
        state = "SUCCEEDED" if calls["n"] >= 6 else "RUNNING"
        data = logs[attempt][offset:]
        return httpx.Response(200, content=data, headers={
            "X-Corral-Attempt": str(attempt), "X-Corral-Task-State": state,
            "X-Corral-Log-Size": str(len(logs[attempt]))})

    switched = []
    chunks = client_for(handler).logs(1, follow=True, poll=0, on_attempt=switched.append)
    assert b"".join(chunks) == b"first\nlate\nsecond\n"
    assert switched == [1]


def test_upload_puts_only_a_missing_bundle(tmp_path):
    (tmp_path / "f").write_text("x")
    stored: dict[str, bytes] = {}

    def handler(request):
        digest = request.url.path.rsplit("/", 1)[1]
        if request.method == "HEAD":
            return httpx.Response(200 if digest in stored else 404)
        assert hashlib.sha256(request.content).hexdigest() == digest
        stored[digest] = request.content
        return httpx.Response(201, json={"digest": digest})

    api = client_for(handler)
    digest = api.upload_bundle(tmp_path)
    assert list(stored) == [digest]
    stored[digest] = b"kept"
    assert api.upload_bundle(tmp_path) == digest and stored[digest] == b"kept"


def sse_event(event_id: int, job_id: int, to_state: str, task_id: int | None = None) -> str:
    data = {"id": event_id, "job_id": job_id, "task_id": task_id, "to_state": to_state}
    return f"id: {event_id}\nevent: x\ndata: {json.dumps(data)}\n\n"


def waiting_controller(states: list[str], streams: list[str]):
    """A controller whose job 3 goes through `states` at each read, and whose event stream is `streams`, one per
    connection; what it was asked is recorded in `asked`."""
    asked: list[httpx.Request] = []
    reads, connections = iter(states), iter(streams)

    def handler(request):
        asked.append(request)
        if request.url.path == "/api/v1/events":
            return httpx.Response(200, text=next(connections, "retry: 10\n\n"),
                                  headers={"Content-Type": "text/event-stream"})
        return httpx.Response(200, json=json.loads(job_view(3, state=next(reads, states[-1])).model_dump_json()))

    return handler, asked


def test_wait_returns_on_the_jobs_terminal_event_after_reading_the_job_twice():
    handler, asked = waiting_controller(["RUNNING", "SUCCEEDED"], [
        sse_event(1, 3, "SUCCEEDED", task_id=30) + sse_event(2, 3, "RUNNING") + sse_event(3, 3, "SUCCEEDED")])
    assert client_for(handler).wait(3).state == "SUCCEEDED"
    assert [r.url.path for r in asked] == ["/api/v1/events", "/api/v1/jobs/3", "/api/v1/jobs/3"]
    assert dict(asked[0].url.params) == {"job": "3", "last": "1", "follow": "true"}


def test_wait_on_a_job_that_already_ended_reads_it_once():
    handler, asked = waiting_controller(["FAILED"], [])
    assert client_for(handler).wait(3).state == "FAILED"
    assert [r.url.path for r in asked] == ["/api/v1/events", "/api/v1/jobs/3"]


def test_wait_resumes_a_dropped_stream_after_the_last_event_seen():
    handler, asked = waiting_controller(["PENDING", "CANCELLED"], [
        sse_event(7, 3, "RUNNING"), sse_event(8, 3, "CANCELLED")])
    assert client_for(handler).wait(3).state == "CANCELLED"
    reconnect = [r for r in asked if r.url.path == "/api/v1/events"][1]
    assert reconnect.headers["Last-Event-ID"] == "7" and reconnect.url.params["after"] == "7"
    assert sum(r.url.path == "/api/v1/jobs/3" for r in asked) == 2


def test_wait_times_out():
    handler, _ = waiting_controller(["PENDING"], [])
    with pytest.raises(TimeoutError):
        client_for(handler).wait(3, timeout=0.05)


def test_an_unchanged_tree_is_not_archived_again_while_the_controller_has_it(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "train.py").write_text("print(1)")
    stored: dict[str, bytes] = {}
    calls: list[str] = []

    def handler(request):
        digest = request.url.path.rsplit("/", 1)[1]
        calls.append(request.method)
        if request.method == "HEAD":
            return httpx.Response(200 if digest in stored else 404)
        stored[digest] = request.content
        return httpx.Response(201, json={"digest": digest})

    api = client_for(handler)
    digest = api.upload_bundle(tree)
    archived = []
    monkeypatch.setattr("corral.client.bundle.make_bundle", lambda directory: archived.append(directory) or b"x")
    calls.clear()
    assert api.upload_bundle(tree) == digest and calls == ["HEAD"] and archived == []
    stored.clear()  # the controller lost it: archived and sent again
    api.upload_bundle(tree)
    assert archived == [tree] and calls[-1] == "PUT"
    (tree / "train.py").write_text("print(22)")  # changed: archived again, whatever the memo said
    api.upload_bundle(tree)
    assert archived == [tree, tree]


def test_healthy_is_a_yes_or_no_never_an_error():
    assert client_for(lambda request: httpx.Response(200, json={"ok": True})).healthy()
    assert not client_for(lambda request: httpx.Response(503, text="starting")).healthy()

    def refuse(request):
        raise httpx.ConnectError("connection refused", request=request)

    assert not client_for(refuse).healthy()


async def test_a_standalone_routers_calls_go_through_the_async_client():
    from corral.client.aio import AsyncClient

    seen = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.path, json.loads(request.content or b"null")))
        if request.url.path.endswith("/scale"):
            return httpx.Response(409, json={"detail": "deployment web is being destroyed"})
        return httpx.Response(204)

    async with AsyncClient("http://ctl:1", "tok", transport=httpx.MockTransport(answer)) as client:
        await client.report_router_load("r1", {"web": 3})
        with pytest.raises(CorralError, match="being destroyed"):
            await client.scale_deployment("web", 2, "load 3 at router r1")
    assert seen == [("POST", "/api/v1/router/load", {"router": "r1", "loads": {"web": 3}}),
                    ("POST", "/api/v1/deployments/web/scale", {"replicas": 2, "reason": "load 3 at router r1"})]
