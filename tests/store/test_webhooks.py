"""The webhook outbox on both stores: filled from the event stream, sent signed, retried, given up, claimed once."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from sqlalchemy import event, insert, select

from corral.controller.webhooks import HANDLER, LEASE, Webhooks, guarded_client
from corral.core.estimates import moved_message
from corral.core.webhooks import MAX_TRIES, parse_network, signature
from corral.metrics import REGISTRY
from corral.store.events import PAGE, latest_id, read_events
from corral.store.handler_locks import HandlerBusy
from corral.store.schema import deliveries, history
from corral.store.store import Store
from corral.store.webhooks import (
    claim_due,
    read_cursor,
    rotate_secret,
    set_project_default,
    webhook_secret,
)
from tests.postgres import scratch_database
from tests.store.helpers import submit

HOOK = "http://hooks.test/corral"


class Receiver:
    """An httpx transport that answers with `statuses` in turn (then 200) and keeps what it was sent."""

    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(self.statuses.pop(0) if self.statuses else 200, text="ignored")

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self), follow_redirects=False)

    def events(self) -> list[tuple[int, str]]:
        return [(json.loads(r.content)["job"]["id"], r.headers["X-Corral-Event"]) for r in self.requests]


async def _moved(store, job_id, to_state, at, handler="Settle", task_id=None, message=None):
    async with store.write() as connection:
        await connection.execute(insert(history).values(at=at, job_id=job_id, task_id=task_id, handler=handler,
                                                        result="SUCCESS", to_state=to_state, message=message))


async def _deliveries(store):
    async with store.read() as connection:
        return (await connection.execute(select(deliveries).order_by(deliveries.c.id))).all()


async def test_a_jobs_start_and_end_are_posted_signed_and_other_rows_are_not(store):
    webhooks, receiver, now = Webhooks(store, "9.9", 86400.0), Receiver(), time.time()
    async with receiver.client() as client:
        await webhooks.run_pass(client, now)  # the cursor starts here: nothing older is sent
        job_id = await submit(store, notify=HOOK)
        quiet = await submit(store)
        for moved, task_id in (("RUNNING", 1), ("RUNNING", None), ("SUCCEEDED", None)):
            await _moved(store, job_id, moved, now - 10, task_id=task_id)
        await _moved(store, quiet, "RUNNING", now - 10)
        await webhooks.run_pass(client, now)
        await webhooks.run_pass(client, now)  # nothing is sent twice
    assert receiver.events() == [(job_id, "job.started"), (job_id, "job.succeeded")]
    async with store.read() as connection:
        secret = await webhook_secret(connection)
    for request in receiver.requests:
        assert str(request.url) == HOOK and request.headers["User-Agent"] == "corral/9.9"
        stamp = int(request.headers["X-Corral-Timestamp"])
        assert request.headers["X-Corral-Signature"] == signature(secret, stamp, request.content)
        body = json.loads(request.content)
        assert body["delivery"] == int(request.headers["X-Corral-Delivery"])
        assert body["job"]["project"] == "default" and body["job"]["user"] == "admin"
    assert json.loads(receiver.requests[1].content)["job"]["state"] == "SUCCEEDED"
    assert [(row.tries, row.delivered_at is not None, row.next_try_at) for row in await _deliveries(store)] == \
        [(1, True, None)] * 2


async def test_the_project_default_serves_jobs_that_name_none_and_none_opts_out(store):
    webhooks, receiver, now = Webhooks(store, "1", 86400.0), Receiver(), time.time()
    async with receiver.client() as client:
        await webhooks.run_pass(client, now)
        async with store.write() as connection:
            await set_project_default(connection, "vision", "http://hooks.test/vision", "pa", now)
        default = await submit(store, project="vision")
        own = await submit(store, project="vision", notify=HOOK)
        opted_out = await submit(store, project="vision", notify="none")
        other_project = await submit(store, project="audio")
        for job_id in (default, own, opted_out, other_project):
            await _moved(store, job_id, "FAILED", now - 10)
        await webhooks.run_pass(client, now)
    assert {(json.loads(r.content)["job"]["id"], str(r.url)) for r in receiver.requests} == {
        (default, "http://hooks.test/vision"), (own, HOOK)}
    assert {r.headers["X-Corral-Event"] for r in receiver.requests} == {"job.failed"}


async def test_an_estimate_move_carries_both_estimates(store):
    webhooks, receiver, now = Webhooks(store, "1", 86400.0), Receiver(), time.time()
    async with receiver.client() as client:
        await webhooks.run_pass(client, now)
        job_id = await submit(store, notify=HOOK)
        await _moved(store, job_id, None, now - 10, handler="EstimateStarts",
                     message=moved_message("~5m", "~2h"))
        await webhooks.run_pass(client, now)
    (request,) = receiver.requests
    body = json.loads(request.content)
    assert (body["event"], body["job"]["state"], body["estimate"]) == (
        "job.estimate_moved", "PENDING", {"before": "~5m", "after": "~2h"})


def _count(metric: str, event: str) -> float:
    return REGISTRY.get_sample_value(f"corral_notifications_{metric}_total", {"event": event}) or 0.0


async def test_a_failing_receiver_is_retried_with_backoff_then_given_up_with_a_job_event(store):
    counted = {metric: _count(metric, "job.started") for metric in ("delivered", "failed", "gave_up")}
    webhooks, receiver, now = Webhooks(store, "1", 86400.0, backoff=1.0), Receiver(*[500] * MAX_TRIES), time.time()
    async with receiver.client() as client:
        await webhooks.run_pass(client, now)
        job_id = await submit(store, notify=HOOK)
        await _moved(store, job_id, "RUNNING", now - 10)
        await webhooks.run_pass(client, now)
        assert len(receiver.requests) == 1
        await webhooks.run_pass(client, now + 0.5)  # not due yet: the first retry waits about 1 s
        assert len(receiver.requests) == 1
        (row,) = await _deliveries(store)
        assert (row.tries, row.last_error) == (1, "HTTP 500") and now + 0.8 <= row.next_try_at <= now + 1.2
        for later in range(1, 450):  # the waits add up to about 361 s (1 s, 3 s, 9 s ... capped at 120 s)
            await webhooks.run_pass(client, now + later)
    assert len(receiver.requests) == MAX_TRIES
    assert len({r.headers["X-Corral-Delivery"] for r in receiver.requests}) == 1
    (row,) = await _deliveries(store)
    assert (row.tries, row.next_try_at, row.delivered_at, row.gave_up_at is not None) == (MAX_TRIES, None, None, True)
    async with store.read() as connection:
        gave_up = [e for e in await read_events(connection, 0, job_id) if e.type == "job.notification_gave_up"]
    assert [e.message for e in gave_up] == [f"notification to {HOOK} gave up after {MAX_TRIES} tries: HTTP 500"]
    assert {metric: _count(metric, "job.started") - before for metric, before in counted.items()} == {
        "delivered": 0, "failed": MAX_TRIES, "gave_up": 1}


@pytest.mark.parametrize("answer", [302, 404])
async def test_a_redirect_or_an_error_is_not_a_delivery(store, answer):
    webhooks, receiver, now = Webhooks(store, "1", 86400.0), Receiver(answer), time.time()
    async with receiver.client() as client:
        await webhooks.run_pass(client, now)
        await _moved(store, await submit(store, notify=HOOK), "RUNNING", now - 10)
        await webhooks.run_pass(client, now)
    (row,) = await _deliveries(store)
    assert row.delivered_at is None and row.last_error.startswith(f"HTTP {answer}")


async def test_a_claimed_delivery_is_not_sent_by_another_controller_until_its_lease_ran_out(store):
    webhooks, now = Webhooks(store, "1", 86400.0), time.time()
    async with Receiver().client() as client:
        await webhooks.run_pass(client, now)
    await _moved(store, await submit(store, notify=HOOK), "RUNNING", now - 10)
    async with store.write() as connection:
        await webhooks._fill(connection, now)
        first = await claim_due(connection, now, LEASE, 10)
    async with store.write() as connection:
        assert await claim_due(connection, now + 1, LEASE, 10) == []
        assert [d.id for d in await claim_due(connection, now + LEASE, LEASE, 10)] == [d.id for d in first]


async def test_the_secret_is_made_once_and_rotated_on_demand(store):
    async with store.write() as connection:
        first = await webhook_secret(connection)
        assert await webhook_secret(connection) == first and len(first) == 64
        rotated = await rotate_secret(connection)
        assert rotated != first and await webhook_secret(connection) == rotated


async def test_two_controllers_on_one_postgresql_store_send_each_delivery_once():
    async with scratch_database() as url:
        stores = [await Store.open(url), await Store.open(url)]
        try:
            senders, receiver, now = [Webhooks(s, "1", 86400.0) for s in stores], Receiver(), time.time()
            async with receiver.client() as client:
                await senders[0].run_pass(client, now)
                jobs = [await submit(stores[0], notify=HOOK) for _ in range(30)]
                for job_id in jobs:
                    await _moved(stores[0], job_id, "RUNNING", now - 10)
                async with stores[1].write(HANDLER):  # while one holds the lock, the other skips its pass
                    with pytest.raises(HandlerBusy):
                        await senders[0].run_pass(client, now)
                for _ in range(5):  # both at once: one runs the pass, the other finds the lock taken
                    ended = await asyncio.gather(*(sender.run_pass(client, now) for sender in senders),
                                                 return_exceptions=True)
                    assert all(isinstance(e, bool | HandlerBusy) for e in ended), ended
            assert sorted(job_id for job_id, _ in receiver.events()) == jobs
        finally:
            for opened in stores:
                await opened.close()


async def test_a_backlog_longer_than_a_page_is_read_page_after_page_without_waiting(store):
    webhooks, receiver, now = Webhooks(store, "1", 86400.0), Receiver(), time.time()
    async with receiver.client() as client:
        await webhooks.run_pass(client, now)
        job_id = await submit(store, notify=HOOK)
        async with store.write() as connection:  # a page of the job's own rows that are no notification
            await connection.execute(insert(history), [
                {"at": now - 10, "job_id": job_id, "handler": "ScheduleJobs", "result": "WAIT", "to_state": None}
                for _ in range(PAGE)])
        await _moved(store, job_id, "RUNNING", now - 10)
        assert await webhooks.run_pass(client, now) is True and receiver.requests == []
        assert await webhooks.run_pass(client, now) is False
    assert receiver.events() == [(job_id, "job.started")]


async def test_the_rows_of_tasks_workers_and_deployments_are_passed_over_unread(store):
    webhooks, receiver, now = Webhooks(store, "1", 86400.0), Receiver(), time.time()
    async with receiver.client() as client:
        await webhooks.run_pass(client, now)
        job_id = await submit(store, notify=HOOK)
        async with store.write() as connection:  # more than a page of rows that can be no notification
            await connection.execute(insert(history), [
                {"at": now - 10, "job_id": job_id, "task_id": 1, "handler": "Worker", "result": "SUCCESS",
                 "to_state": "RUNNING"} for _ in range(PAGE)])
            await connection.execute(insert(history).values(
                at=now - 10, job_id=None, worker_id="w1", handler="Reaper", result="SUCCESS"))
            await connection.execute(insert(history).values(
                at=now - 10, job_id=job_id, deployment_id=1, handler="Serve", result="SUCCESS", to_state="RUNNING"))
        await _moved(store, job_id, "RUNNING", now - 10)
        assert await webhooks.run_pass(client, now) is False  # one pass: the job's start, the cursor past the rest
        assert await webhooks.run_pass(client, now + 1) is False
        async with store.read() as connection:
            assert await read_cursor(connection) == await latest_id(connection)
    assert receiver.events() == [(job_id, "job.started")]


async def test_a_pass_with_nothing_new_or_due_takes_no_write(store, monkeypatch):
    webhooks, receiver, now = Webhooks(store, "1", 86400.0), Receiver(), time.time()
    writes = []
    write = store.write

    def counted(*args, **kwargs):
        writes.append(args)
        return write(*args, **kwargs)

    async with receiver.client() as client:
        await webhooks.run_pass(client, now)  # the first seeds the cursor
        monkeypatch.setattr(store, "write", counted)
        await webhooks.run_pass(client, now + 1)
        assert writes == []
        job_id = await submit(store, notify=HOOK)  # a new event: the next pass writes, and sends nothing for it
        writes.clear()
        await webhooks.run_pass(client, now + 2)
        assert writes and receiver.requests == []
        await _moved(store, job_id, "RUNNING", now)
        await webhooks.run_pass(client, now + 3)
    assert receiver.events() == [(job_id, "job.started")]


async def test_one_jobs_deliveries_due_together_arrive_in_order(store):
    """The receiver takes a while over a start: its end, due in the same pass, still arrives after it."""
    heard: list[str] = []

    async def slow_start(request: httpx.Request) -> httpx.Response:
        event = request.headers["X-Corral-Event"]
        if event == "job.started":
            await asyncio.sleep(0.2)
        heard.append(event)
        return httpx.Response(200)

    webhooks, now = Webhooks(store, "1", 86400.0), time.time()
    async with httpx.AsyncClient(transport=httpx.MockTransport(slow_start)) as client:
        await webhooks.run_pass(client, now)
        job_id = await submit(store, notify=HOOK)
        await _moved(store, job_id, "RUNNING", now - 10)
        await _moved(store, job_id, "SUCCEEDED", now - 9)
        await webhooks.run_pass(client, now)
    assert heard == ["job.started", "job.succeeded"]


class _Took(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def local_receiver():
    """A real receiver on 127.0.0.1: loopback, which webhooks may reach only when the admin lets it through."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Took)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def test_a_webhook_to_an_address_that_is_not_public_is_refused_at_once_unless_let_through(store, local_receiver):
    now = time.time()
    by_name = local_receiver.replace("127.0.0.1", "localhost")
    for let_through in ((), (parse_network("127.0.0.0/8"), parse_network("::1"))):
        webhooks = Webhooks(store, "1", 86400.0, allowed=let_through)
        async with guarded_client(webhooks.allowed) as client:
            await webhooks.run_pass(client, now)
            jobs = [await submit(store, notify=f"{url}/hook") for url in (local_receiver, by_name)]
            for job_id in jobs:
                await _moved(store, job_id, "RUNNING", now - 10)
            await webhooks.run_pass(client, now)
        rows = (await _deliveries(store))[-2:]
        if let_through:
            assert [(row.tries, row.delivered_at is not None) for row in rows] == [(1, True)] * 2
            continue
        assert [(row.tries, row.next_try_at, row.gave_up_at is not None) for row in rows] == [(1, None, True)] * 2
        assert rows[0].last_error == ("refused: 127.0.0.1 is a loopback address (corral controller --notify-allow "
                                      "NETWORK lets it through)")
        assert rows[1].last_error.startswith("refused: localhost: ") and "loopback" in rows[1].last_error
        async with store.read() as connection:
            gave_up = [e.message for e in await read_events(connection, 0, jobs[0])
                       if e.type == "job.notification_gave_up"]
        assert gave_up == [f"notification to {local_receiver}/hook gave up after 1 try: {rows[0].last_error}"]


async def test_the_guarded_client_connects_to_the_address_it_checked(local_receiver):
    """The check sits where the connection opens: an address let through is reached, another loopback one is not."""
    async with guarded_client([parse_network("127.0.0.1")]) as client:
        assert (await client.post(f"{local_receiver}/x", content=b"{}")).status_code == 204
    async with guarded_client([parse_network("10.0.0.0/8")]) as client:
        with pytest.raises(httpx.ConnectError, match="loopback"):
            await client.post(f"{local_receiver}/x", content=b"{}")


async def test_rows_of_jobs_that_name_no_url_in_a_cluster_with_no_default_move_the_cursor_unread(store):
    """Most clusters name no URL: a pass then reads the ids of the page of job rows alone, not each row's columns, its
    task and deployment joined and a view made of it, nor the jobs' specs; the cursor moves where it moved."""
    webhooks, receiver, now = Webhooks(store, "1", 86400.0), Receiver(), time.time()
    async with receiver.client() as client:
        await webhooks.run_pass(client, now)
        quiet = [await submit(store) for _ in range(3)]
        for job_id in quiet:
            await _moved(store, job_id, "RUNNING", now - 10)
            await _moved(store, job_id, "SUCCEEDED", now - 10)
        statements: list[str] = []
        event.listen(store.writer.sync_engine, "before_cursor_execute",
                     lambda _c, _cursor, statement, *_rest: statements.append(statement))
        assert await webhooks.run_pass(client, now) is False
        async with store.read() as connection:
            assert await read_cursor(connection) == await latest_id(connection)
        assert not [s for s in statements if "JOIN tasks" in s or "jobs.owner" in s]  # the rows' read, the specs'
        named = await submit(store, notify=HOOK)  # one job that names a URL: its rows are read as before
        await _moved(store, named, "RUNNING", now - 10)
        await webhooks.run_pass(client, now)
    assert receiver.events() == [(named, "job.started")]
    assert await _deliveries(store) and len(await _deliveries(store)) == 1
