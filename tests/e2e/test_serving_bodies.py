"""End to end: request bodies streamed through the router, and clients that leave while sending one."""

from __future__ import annotations

import hashlib
import socket

import httpx
import pytest

from tests.e2e.test_serving import SERVER, deploy, healthy
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e


def test_a_body_larger_than_socket_buffers_streams_through_whole(cluster):
    deploy(cluster, "sink")
    healthy(cluster, "sink", 1)
    size = 8 * 2**20

    def pieces():
        for i in range(size // 2**16):
            yield bytes([i % 251]) * 2**16

    whole = b"".join(pieces())
    expected = {"length": size, "sha256": hashlib.sha256(whole).hexdigest()}
    with httpx.Client(base_url=cluster.url, headers={"Authorization": f"Bearer {cluster.admin_token}"},
                      timeout=60) as http:
        chunked = http.post("/serve/sink/digest", content=pieces())  # no length known up front
        assert chunked.status_code == 200 and chunked.json() == expected
        sized = http.post("/serve/sink/digest", content=whole)
        assert sized.status_code == 200 and sized.json() == expected


def test_a_client_that_leaves_while_queued_and_still_sending_its_body_leaves_the_queue_at_once(cluster):
    deploy(cluster, "sleepy", min_replicas=0, command=["sh", "-c", f"sleep 60; exec {' '.join(SERVER)}"])
    host, port = cluster.url.removeprefix("http://").rsplit(":", 1)
    client = socket.create_connection((host, int(port)))
    client.sendall(f"POST /serve/sleepy/echo HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {cluster.admin_token}"
                   f"\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n".encode())  # the body goes on...
    waiting = wait_for(lambda: cluster.get("/api/v1/router/queue")["waiting"], 10, "the request to wait")
    assert [w["deployment"] for w in waiting] == ["sleepy"]
    client.close()  # ...until the client goes away, half-way through it
    wait_for(lambda: cluster.get("/api/v1/router/queue")["waiting"] == [], 5, "the queue to empty")
