"""End to end in a real headless Chromium: the dashboard of a live local cluster.

Jobs are submitted through the CLI, as a user would, and the page must follow them without
a reload. Each page's screenshot is left in the test artefacts (test-artifacts/ by default).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.browser import launch, screenshot, unavailable
from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.e2e
PY = sys.executable
TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("dashboard"))
    cluster.start_controller()
    cluster.start_worker("w1")
    cluster.start_worker("w2")
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("playwright is not installed (pip install -e '.[dev]')")
    with sync_playwright() as playwright:
        opened = launch(playwright)
        yield opened
        opened.close()


@pytest.fixture
def page(browser, live):
    """A signed-in tab; fails the test on any script error in the page."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    tab = context.new_page()
    tab.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.goto(live.url + "/")
    tab.get_by_label("Token").fill(live.admin_token)
    tab.get_by_role("button", name="Sign in").click()
    tab.get_by_role("heading", name="Overview").wait_for()
    yield tab
    context.close()
    assert not errors, errors


def corral(live, *args: str) -> str:
    env = {**os.environ, "CORRAL_URL": live.url, "CORRAL_TOKEN": live.admin_token}
    # from the cluster's own directory: tasks submitted without --workdir start there, not in the repository
    result = subprocess.run([PY, "-m", "corral", *args], capture_output=True, text=True, env=env, timeout=60,
                            cwd=live.root)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_a_wrong_token_is_refused_at_the_login_form(browser, live):
    context = browser.new_context()
    tab = context.new_page()
    tab.goto(live.url + "/")
    tab.get_by_label("Token").fill("not-the-token")
    tab.get_by_role("button", name="Sign in").click()
    tab.get_by_role("alert").filter(has_text="That token was refused").wait_for()
    assert tab.get_by_role("heading", name="Sign in").is_visible()
    screenshot(tab, "login")
    context.close()


def test_a_job_submitted_from_the_cli_appears_and_succeeds_without_a_reload(page, live):
    page.goto(live.url + "/#/jobs")
    page.wait_for_selector("table[aria-label=jobs]")
    page.evaluate("window.notReloaded = true")
    job_id = corral(live, "submit", "--name", "hello", "--", "sh", "-c", "sleep 1; echo hello from corral")
    row = page.locator(f'tr[data-job="{job_id}"]')
    row.wait_for()
    row.locator(".s-succeeded").wait_for()
    assert page.evaluate("window.notReloaded") is True
    screenshot(page, "jobs")

    row.get_by_role("link", name="hello").click()
    page.locator("pre.log").filter(has_text="hello from corral").wait_for()
    page.get_by_role("list", name="transitions").filter(has_text="ScheduleJobs").wait_for()
    assert page.locator("h1 .muted").inner_text() == f"#{job_id}"
    # submitted from the cluster's directory, which its workers share: the task ran there, nothing was uploaded
    page.locator("dl.spec dd").filter(has_text=f"{live.root} (files not uploaded").wait_for()
    page.locator(".start").filter(has_text=f"started in {live.root} (shared)").wait_for()
    screenshot(page, "job")


def test_a_running_job_is_cancelled_from_its_page_after_a_confirmation(page, live):
    job_id = int(corral(live, "submit", "--name", "long", "--", "sh", "-c", "echo working; sleep 300"))
    live.wait_state(job_id, "RUNNING")
    page.goto(f"{live.url}/#/jobs/{job_id}")
    page.locator("pre.log").filter(has_text="working").wait_for()
    page.get_by_role("button", name="Cancel job").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("button", name="Keep it running").click()
    assert live.job(job_id)["state"] == "RUNNING"
    page.get_by_role("button", name="Cancel job").click()
    dialog.get_by_role("button", name="Cancel job").click()
    page.locator(".head .s-cancelled").wait_for()
    assert live.job(job_id)["state"] == "CANCELLED"


def test_every_page_renders_live_data(page, live):
    corral(live, "submit", "--name", "too-big", "--cpus", "64", "--", "true")
    failing = int(corral(live, "submit", "--name", "fails", "--", "sh", "-c", "exit 3"))
    page.goto(live.url + "/#/queue")
    page.locator("table[aria-label=queue]").filter(has_text="too-big").wait_for()
    page.get_by_text("waiting for one to join").first.wait_for()
    page.locator("table[aria-label=queue] td").filter(has_text="unknown: no worker can ever fit it").wait_for()
    screenshot(page, "queue")
    page.goto(live.url + "/#/workers")
    page.locator("tr[data-worker]").nth(1).wait_for()
    assert page.locator("tr[data-worker] .badge").count() == 2  # alive, unless this machine stalled one
    screenshot(page, "workers")
    page.goto(live.url + "/#/")
    page.get_by_role("meter", name="cpu").first.wait_for()
    page.get_by_role("img").first.wait_for()
    page.locator("table[aria-label=controllers] tr[data-controller]").filter(has_text="(this)").wait_for()
    screenshot(page, "overview")
    live.wait_end(failing)
    page.goto(live.url + "/#/jobs?state=PENDING")
    page.locator("tr[data-job]").filter(has_text="too-big").wait_for()
    assert page.locator("tr[data-job]").count() == 1
    page.get_by_role("button", name="Name").click()  # sort by name, on the server
    page.wait_for_function("location.hash.includes('sort=name')")


def test_a_pending_jobs_page_says_what_would_it_take(page, live):
    job_id = corral(live, "submit", "--name", "eight-cores", "--cpus", "8", "--", "true")  # the workers have 4 each
    page.goto(f"{live.url}/#/jobs/{job_id}")
    panel = page.locator("section.what-if")
    panel.get_by_role("heading", name="What would it take").wait_for()
    panel.get_by_text("As it is: unknown: no worker can ever fit it").wait_for()
    row = panel.locator("tbody tr").filter(has_text="instead of 8")
    row.wait_for()
    assert row.locator("code").inner_text().startswith("--cpus ") and row.locator("td").nth(1).inner_text() == "now"
    screenshot(page, "what-if")
    corral(live, "cancel", job_id)
    panel.wait_for(state="hidden")


def test_a_deployment_and_its_replica_turning_healthy_appear_without_a_reload(page, live):
    page.goto(live.url + "/#/deployments")
    page.get_by_role("heading", name="Deployments").wait_for()
    page.evaluate("window.notReloaded = true")
    server = Path(__file__).resolve().parents[1] / "serving_app" / "server.py"
    # the server takes 2s to start: the replica is seen starting before it is healthy
    corral(live, "deploy", "embed", "--model-name", "embed-small", "--health-interval", "0.3", "--cpus", "0.5",
           "--", "sh", "-c", f"sleep 2; exec {PY} {server}")
    card = page.locator('section[data-deployment="embed"]')
    replica = card.locator("tr[data-replica]").first
    replica.locator(".s-provisioning, .s-degraded").wait_for()
    replica.locator(".s-healthy").wait_for()
    replica.locator(".health.ok").filter(has_text="passing").wait_for()
    card.locator("[data-ready]").filter(has_text="1 / 1 ready").wait_for()
    timeline = card.get_by_role("list", name="deployment events")
    timeline.locator("li").filter(has_text="replica.healthy").wait_for()
    assert timeline.locator("li").filter(has_text="deployment.created").count() == 1
    assert card.locator(".tag").filter(has_text="embed-small").count() == 1
    assert "127.0.0.1:" in replica.locator("td.mono").inner_text()
    assert page.evaluate("window.notReloaded") is True
    screenshot(page, "deployments")
    page.get_by_role("link", name="Overview").click()
    page.locator("#serving-title + p [data-ready]").filter(has_text="1 of 1 replicas ready").wait_for()


def test_jobs_filter_and_show_their_project_and_pool_and_no_gpu_peak_without_gpus(page, live):
    ours = int(corral(live, "submit", "--name", "tagged", "--project", "vision", "--pool", "spare", "--", "true"))
    corral(live, "submit", "--name", "other", "--", "true")
    page.goto(live.url + "/#/jobs?project=vision")
    row = page.locator(f'tr[data-job="{ours}"]')
    row.wait_for()
    assert page.locator("tr[data-job]").count() == 1
    assert [cell.strip() for cell in row.locator("td").all_inner_texts()[4:7]] == ["admin", "vision", "spare"]
    page.goto(live.url + "/#/jobs?pool=spare")
    page.locator(f'tr[data-job="{ours}"]').wait_for()
    assert page.locator("tr[data-job]").count() == 1
    page.goto(f"{live.url}/#/queue")
    page.locator(f'table[aria-label=queue] tr:has(a[href="#/jobs/{ours}"])').get_by_role(
        "cell", name="spare", exact=True).wait_for()
    page.goto(live.url + "/#/")
    gpus = page.locator("figure.chart figcaption").filter(has_text="GPUs in use")
    gpus.wait_for()
    assert gpus.inner_text().endswith("now 0, peak 0")  # these workers have no GPU


def test_the_header_says_who_is_signed_in(page, live):
    page.locator("#who").filter(has_text="admin · cluster-admin").wait_for()


def test_a_personal_token_signs_in_as_its_user_and_the_jobs_filter_by_user(browser, live):
    corral(live, "user", "create", "dora", "--project", "atlas")
    secret = corral(live, "token", "create", "--user", "dora", "--name", "browser")
    env = {**os.environ, "CORRAL_URL": live.url, "CORRAL_TOKEN": secret}
    submitted = subprocess.run([PY, "-m", "corral", "submit", "--name", "doras", "--project", "atlas", "--", "true"],
                               capture_output=True, text=True, env=env, timeout=60, cwd=live.root)
    assert submitted.returncode == 0, submitted.stderr
    theirs, admins = int(submitted.stdout.strip()), int(corral(live, "submit", "--name", "admins", "--", "true"))
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    tab = context.new_page()
    tab.set_default_timeout(TIMEOUT_MS)
    tab.goto(live.url + "/")
    tab.get_by_label("Token").fill(secret)
    tab.get_by_role("button", name="Sign in").click()
    tab.locator("#who").filter(has_text="dora · member").wait_for()
    assert tab.locator("#who").get_attribute("title") == "atlas: member"
    tab.locator("#live.on").filter(has_text="live").wait_for()  # the event stream of its projects follows
    screenshot(tab, "signed-in-as-a-user")
    context.close()

    page = browser.new_context().new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(live.url + "/")
    page.get_by_label("Token").fill(live.admin_token)
    page.get_by_role("button", name="Sign in").click()
    page.goto(live.url + "/#/jobs")
    page.locator(f'tr[data-job="{admins}"]').wait_for()
    page.get_by_label("User").fill("dora")
    page.get_by_role("button", name="Filter").click()
    row = page.locator(f'tr[data-job="{theirs}"]')
    page.locator(f'tr[data-job="{admins}"]').wait_for(state="detached")  # theirs was listed before the filter too
    row.wait_for()
    assert page.locator("tr[data-job]").count() == 1 and "owner=dora" in page.url
    assert row.locator("td").all_inner_texts()[4].strip() == "dora"
    page.context.close()


def test_the_workers_page_shows_a_bar_per_gpu_with_a_segment_per_task(page, live):
    """The worker list as a GPU worker gives it (two H100s: two shares on one, a whole-device task on the other);
    these workers have no GPU, so the page is given the list."""
    devices = [
        {"index": 0, "model": "NVIDIA H100", "memory": 80 * 2**30, "booked": 0.75, "memory_reserved": 20 * 2**30,
         "tasks": [{"task_id": 3, "job_id": 7, "index": 0, "share": 0.5},
                   {"task_id": 4, "job_id": 8, "index": 0, "share": 0.25}],
         "memory_used": 15 * 2**29, "utilization": 40},
        {"index": 1, "model": "NVIDIA H100", "memory": 80 * 2**30, "booked": 1.0, "memory_reserved": 0,
         "tasks": [{"task_id": 5, "job_id": 9, "index": 2, "share": 1.0}], "memory_used": None, "utilization": None},
    ]
    worker = live.get("/api/v1/workers")[0]
    worker |= {"capacity": worker["capacity"] | {"gpu": 2}, "used": worker["used"] | {"gpu": 1.75}, "devices": devices}
    page.route("**/api/v1/workers", lambda route: route.fulfill(json=[worker]))
    page.goto(live.url + "/#/workers")
    bars = page.locator(f'tr[data-worker="{worker["id"]}"] .bar.device')
    bars.nth(1).wait_for()
    assert bars.count() == 2
    page.get_by_role("meter", name="gpu: 1.75 of 2 in use").wait_for()
    assert bars.nth(0).get_by_role("meter").get_attribute("aria-label") == (
        "gpu 0 (NVIDIA H100): 0.75 of 1 booked; 7.5 GiB of 80 GiB used, 40% busy")
    assert bars.nth(0).locator("a.fill.share").count() == 2
    assert bars.nth(1).get_by_role("meter").get_attribute("aria-label").endswith("1 of 1 booked; not read")
    assert bars.nth(1).locator("a.fill").get_attribute("href") == "#/jobs/9"
    screenshot(page, "workers-gpus")


def test_the_vendored_terminal_is_served_with_its_content_types(live):
    """`make install` vendored xterm.js (tools/vendor_static.py); the controller serves it, and nothing else there."""
    for name, content_type in [("xterm.js", "text/javascript"), ("addon-fit.js", "text/javascript"),
                               ("xterm.css", "text/css"), ("xterm.LICENSE.txt", "text/plain")]:
        response = live.http.get(f"/static/vendor/{name}")
        assert response.status_code == 200, f"{name}: {response.status_code} (run make install)"
        assert response.headers["content-type"].startswith(content_type)
    assert live.http.get("/static/vendor/pinned.json").status_code == 404


def test_without_the_vendored_terminal_its_panel_says_how_to_build_it(page, live):
    job_id = int(corral(live, "submit", "--name", "no-xterm", "--", "sleep", "300"))
    live.wait_state(job_id, "RUNNING")
    page.route("**/static/vendor/**", lambda route: route.fulfill(status=404, body="not built"))
    page.goto(f"{live.url}/#/jobs/{job_id}")
    page.get_by_role("button", name="Shell in task").click()
    page.locator(".terminal .status.error").filter(has_text="make install").wait_for()
    page.get_by_role("button", name="Close terminal").click()
    assert page.locator(".terminal").is_hidden()
    corral(live, "cancel", str(job_id))


def test_the_terminal_speaks_the_relays_frames_to_a_fake_worker(page, live):
    """The page's side of the relay, the worker's played here: the ticket in the URL, keys out as binary frames,
    output shown after its stream byte, resizes as JSON, role, notice and exit in the status line, and a refusal's
    close reason."""
    job_id = int(corral(live, "submit", "--name", "framed", "--", "sleep", "300"))
    live.wait_state(job_id, "RUNNING")
    page.route(f"**/api/v1/jobs/{job_id}/tickets",
               lambda route: route.fulfill(json={"ticket": "T-1", "expires_in": 30}))
    urls: list[str] = []
    frames: list[str | bytes] = []

    def worker(socket):
        def echo(frame):
            frames.append(frame)
            if isinstance(frame, bytes):
                socket.send(b"\x01" + frame)
            elif json.loads(frame)["type"] == "resize":
                socket.send(b"\x02" + f"[resized to {json.loads(frame)['cols']} columns]".encode())
            if frame == b"q":
                socket.send(json.dumps({"type": "notice", "text": "job 1 is being preempted: 30s left"}))
                socket.send(json.dumps({"type": "exit", "code": 7}))
                socket.close(code=1000)
        urls.append(socket.url)
        socket.on_message(echo)
        socket.send(json.dumps({"type": "role", "writer": True}))
        socket.send(b"\x01prompt$ ")

    page.route_web_socket(re.compile(rf".*/api/v1/jobs/{job_id}/tasks/0/exec\?.*"), worker)
    page.goto(f"{live.url}/#/jobs/{job_id}")
    page.get_by_role("button", name="Shell in task").click()
    page.locator(".terminal .status").filter(has_text="your keys reach the terminal").wait_for()
    rows = page.locator(".terminal .xterm-rows")
    rows.filter(has_text="prompt$").wait_for()
    query = dict(re.findall(r"[?&]([^=&]+)=([^&]*)", urls[0]))
    assert query["ticket"] == "T-1" and query["command"] == "%2Fbin%2Fsh" and query["tty"] == "1", urls[0]
    assert int(query["rows"]) > 5 and int(query["cols"]) > 20
    page.keyboard.type("ls")
    rows.filter(has_text="prompt$ ls").wait_for()
    assert [f for f in frames if f in (b"l", b"s")] == [b"l", b"s"]

    page.set_viewport_size({"width": 700, "height": 800})
    rows.scroll_into_view_if_needed()  # xterm.js draws only while it is in view
    rows.filter(has_text="[resized to").wait_for()
    resize = json.loads(next(f for f in frames if isinstance(f, str)))
    assert resize["type"] == "resize" and resize["cols"] < int(query["cols"])

    page.keyboard.type("q")
    page.locator(".terminal .status").filter(has_text="The process exited with code 7.").wait_for()
    rows.filter(has_text="[corral] job 1 is being preempted: 30s left").wait_for()

    page.route_web_socket(re.compile(rf".*/api/v1/jobs/{job_id}/tasks/0/exec\?.*"),
                          lambda socket: socket.close(code=4409, reason="task 0 is PENDING, not RUNNING"))
    page.get_by_role("button", name="Shell in task").click()
    page.locator(".terminal .status.error").filter(
        has_text="Closed: task 0 is PENDING, not RUNNING (4409).").wait_for()
    corral(live, "cancel", str(job_id))


def test_an_attachments_list_says_what_each_channel_was_open_ones_first(page, live):
    job_id = live.submit(name="watched", command=["sleep", "300"], interactive=True)
    live.wait_state(job_id, "RUNNING")
    common = {"job_id": job_id, "task_index": 0, "attempt": 0, "worker_id": "w1", "address": "10.0.0.7",
              "opened_at": 1_700_000_000.0, "connected_at": 1_700_000_001.0}
    attachments = [
        {**common, "id": 1, "kind": "terminal", "detail": {"watch": False}, "actor": "admin", "state": "closed",
         "closed_at": 1_700_000_100.0, "close_code": 1000, "close_reason": "detached"},
        {**common, "id": 2, "kind": "exec", "detail": {"command": ["nvidia-smi", "-l"], "detach": False},
         "actor": f"job {job_id}", "state": "open", "opened_at": 1_700_000_050.0},
        {**common, "id": 3, "kind": "port", "detail": {"port": 8888}, "actor": "admin", "state": "failed",
         "opened_at": 1_700_000_060.0, "closed_at": 1_700_000_075.0, "close_code": 4500,
         "close_reason": "nothing listens on port 8888"},
    ]
    page.route(f"**/api/v1/jobs/{job_id}/attachments", lambda route: route.fulfill(json=attachments))
    page.goto(f"{live.url}/#/jobs/{job_id}")
    page.locator(".head .tag.kind").filter(has_text="interactive").wait_for()
    page.get_by_role("button", name="Open terminal").wait_for()
    rows = page.locator("table[aria-label=attachments] tbody tr")
    rows.nth(2).wait_for()
    assert [rows.nth(i).get_attribute("data-attachment") for i in range(3)] == ["2", "3", "1"]
    assert rows.nth(0).locator("td").all_inner_texts()[1:5] == ["exec", "nvidia-smi -l", f"job {job_id}", "10.0.0.7"]
    assert rows.nth(1).locator("td").nth(2).inner_text() == "port 8888"
    assert "(4500: nothing listens on port 8888)" in rows.nth(1).locator("td").nth(7).inner_text()
    assert rows.nth(2).locator("td").nth(2).inner_text() == "keyboard"
    corral(live, "cancel", str(job_id))


def test_an_interactive_job_runs_a_terminal_in_the_browser_and_lists_its_attachment(page, live):
    job_id = live.submit(name="browser-shell", command=["/bin/sh"], interactive=True)
    live.wait_state(job_id, "RUNNING")
    page.goto(live.url + "/#/jobs")
    page.locator(f'tr[data-job="{job_id}"] .tag.kind').filter(has_text="interactive").wait_for()

    page.goto(f"{live.url}/#/jobs/{job_id}")
    page.get_by_role("button", name="Open terminal").click()
    page.locator(".terminal .status").filter(has_text="your keys reach the terminal").wait_for()
    page.keyboard.type("echo hello-$((6*7))")
    page.keyboard.press("Enter")
    page.locator(".terminal .xterm-rows").filter(has_text="hello-42").wait_for()
    attachment = page.locator('table[aria-label=attachments] tr[data-state="open"]')
    attachment.filter(has_text="terminal").wait_for()
    page.evaluate("window.scrollTo(0, 0)")  # the full page, its sticky header at the top
    screenshot(page, "terminal")

    page.get_by_role("button", name="Close terminal").click()
    page.locator('table[aria-label=attachments] tr[data-state="closed"]').filter(has_text="terminal").wait_for()
    assert live.job(job_id)["state"] == "RUNNING"  # closing the panel detached: the shell runs on
    corral(live, "cancel", str(job_id))


def test_a_shell_in_a_running_batch_task_runs_in_the_browser(page, live):
    job_id = int(corral(live, "submit", "--name", "looked-into", "--", "sh", "-c", "echo ready; sleep 300"))
    live.wait_state(job_id, "RUNNING")
    page.goto(f"{live.url}/#/jobs/{job_id}")
    page.get_by_role("button", name="Shell in task").click()
    page.locator(".terminal .status").filter(has_text="Connected").wait_for()
    page.keyboard.type("echo exec-$((6*7)); exit 5")
    page.keyboard.press("Enter")
    page.locator(".terminal .xterm-rows").filter(has_text="exec-42").wait_for()
    page.locator(".terminal .status").filter(has_text="exited with code 5").wait_for()
    assert live.job(job_id)["state"] == "RUNNING"  # the task itself runs on
    corral(live, "cancel", str(job_id))
