"""The one server-sent events parser of the clients and the CLI, and the dashboard's, which must read alike.

Both follow the WHATWG rules: ids (kept across events, NUL refused), event names (for one event), `retry:`,
comments, multi-line data, and lines ended by CRLF, LF or CR, however the stream is cut into chunks.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.client.http import Client
from corral.client.sse import Event, EventParser

APP_JS = Path(__file__).resolve().parents[2] / "src" / "corral" / "controller" / "static" / "app.js"
NODE = shutil.which("node")

STREAM = ("\ufeffretry: 1500\n: a comment\nid: 1\nevent: job.submitted\ndata: {\"id\": 1}\n\n"
          "data: line one\ndata:line two\ndata\n\n"
          "id: 2\0\nevent: other\ndata: after a NUL id\n\n"
          "id\nretry: soon\ndata: no id\n\n"
          "event: empty\n\n"
          "id: 3\ndata: cut off")


def python_events(text: str, last_id: str | None = None) -> tuple[list[Event], EventParser]:
    parser = EventParser(last_id)
    lines = re.split(r"\r\n|\r|\n", text)[:-1]  # what follows the last line end is not a line yet
    events = [e for e in map(parser.feed, lines) if e is not None]
    return events, parser


def through_the_client(chunks: list[bytes]) -> list[Event]:
    """`Client.events` over a stream sent in these chunks: httpx splits the lines, the parser reads them."""
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=iter(chunks))

    with Client("http://ctl", "t", transport=httpx.MockTransport(answer)) as client:
        return list(client.events(follow=False))


def test_ids_names_retry_comments_and_multi_line_data():
    events, parser = python_events(STREAM, last_id="0")
    assert events == [Event("1", "job.submitted", {"id": 1}),
                      Event("1", "message", "line one\nline two\n"),
                      Event("1", "other", "after a NUL id"),  # an id holding NUL is ignored
                      Event("", "message", "no id")]  # an empty id resets it; `retry: soon` is ignored
    assert parser.retry == 1.5
    assert parser.last_id == ""  # the cut-off event's id 3 was never dispatched: resume before it
    assert python_events("event:\ndata: x\n\n")[0] == [Event(None, "message", "x")]  # an empty name: the default


@pytest.mark.parametrize("newline", ["\r\n", "\r", "\n"])
@pytest.mark.parametrize("size", [1, 2, 7, 1000])
def test_every_line_ending_in_chunks_of_any_size_reads_the_same(newline, size):
    body = STREAM.replace("\n", newline).encode()
    expected, _ = python_events(STREAM)
    assert through_the_client([body[i:i + size] for i in range(0, len(body), size)]) == expected


def dashboard_events(streams: list[tuple[str, int]]) -> list[dict]:
    """The dashboard's EventStreamParser (from app.js, run by node) on each text cut in chunks of the given size."""
    source = APP_JS.read_text()
    parser_class = re.search(r"^class EventStreamParser \{.*?^\}\n", source, re.S | re.M).group(0)
    script = parser_class + """
const results = [];
for (const [text, size] of JSON.parse(require("fs").readFileSync(0, "utf8"))) {
  const parser = new EventStreamParser("0"), events = [];
  for (let i = 0; i < text.length; i += size) events.push(...parser.push(text.slice(i, i + size)));
  results.push({events, lastId: parser.lastId, retry: parser.retry});
}
console.log(JSON.stringify(results));
"""
    done = subprocess.run([NODE, "-e", script], input=json.dumps(streams), capture_output=True, text=True,
                          timeout=60, check=True)
    return json.loads(done.stdout)


@pytest.mark.skipif(NODE is None, reason="no node to run the dashboard's JavaScript")
def test_the_dashboards_parser_reads_as_the_clients_does():
    stream = STREAM + "\n\n"
    cases = [(stream.replace("\n", newline), size) for newline in ("\r\n", "\r", "\n") for size in (1, 3, 1000)]
    for result in dashboard_events(cases):
        assert [(e["id"], e["type"], e["data"]) for e in result["events"]] == [
            ("1", "job.submitted", '{"id": 1}'), ("1", "message", "line one\nline two\n"),
            ("1", "other", "after a NUL id"), ("", "message", "no id"), ("3", "message", "cut off")]
        assert (result["lastId"], result["retry"]) == ("3", 1500)


LINES = st.sampled_from(["data: a", "data:b", "data", "id: 7", "id: 8\0", "id", "event: e", "event",
                         ": c", "retry: 10", "retry: x", "", "x: y"])


@pytest.mark.skipif(NODE is None, reason="no node to run the dashboard's JavaScript")
@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.lists(LINES, max_size=12), st.sampled_from(["\n", "\r", "\r\n"]),
                          st.integers(1, 8)), min_size=1, max_size=10))
def test_both_parsers_agree_on_any_stream(streams):
    cases = [(newline.join(lines) + newline, size) for lines, newline, size in streams]
    for (text, _), result in zip(cases, dashboard_events(cases), strict=True):
        events, parser = python_events(text, last_id="0")
        as_text = [(e.id, e.type, e.data if isinstance(e.data, str) else json.dumps(e.data)) for e in events]
        assert [(e["id"], e["type"], e["data"]) for e in result["events"]] == as_text
        assert result["lastId"] == parser.last_id
        assert result["retry"] == (None if parser.retry is None else round(parser.retry * 1000))
