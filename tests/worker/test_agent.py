"""The agent against a fake controller speaking the real protocol over httpx, with real task processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import threading
from collections import defaultdict

import httpx
import pytest
from websockets.asyncio.server import serve

from corral.core.protocol import (
    MAX_REPORTS,
    BuildOrder,
    Capacity,
    GpuDevice,
    GpuUse,
    HeartbeatReply,
    HeartbeatRequest,
    PreemptedAck,
    PreemptOrder,
    RegisterReply,
    RegisterRequest,
    RelayOrder,
    StartOrder,
    StopOrder,
    TaskReport,
)
from corral.core.relay import STDOUT
from corral.core.states import TASK_TERMINAL, TaskState
from corral.worker.agent import (
    Agent,
    WorkerError,
    WorkerOptions,
    logs_written_in_background,
    route_address,
    watch_children_by_pidfd,
)
from corral.worker.environments import Interpreter
from tests.waiting import wait_until
from tests.worker.support import gone

URL = "http://127.0.0.1:9"


class FakeController:
    """Just enough controller: registrations, task states driven by reports, orders derived from them."""

    def __init__(self) -> None:
        self.registrations: list[tuple[str, RegisterRequest]] = []
        self.reports: list[tuple[str, TaskReport]] = []
        self.batches: list[list[tuple[int, str]]] = []  # the (task, state) reports of each heartbeat carrying some
        self.logs: defaultdict[tuple[int, int, str], bytes] = defaultdict(bytes)
        self.logs_at_end: dict[int, dict] = {}
        self.tasks: dict[int, dict] = {}  # task id -> {"state", "worker", "build"}
        self.lost: set[str] = set()
        self.down = False
        self.down_after_orders = False  # go down right after a reply that carries orders
        self.missed = 0  # requests that found the controller down
        self.missed_reports = 0  # heartbeats with reports that found the controller down
        self.pythons: list[list[str]] = []  # the Python versions heartbeats brought
        self.gpu_readings: list[list[GpuUse]] = []  # the devices' use heartbeats brought
        self.holdings: list[set[tuple[int, int]]] = []  # the attempts each heartbeat said its worker holds
        self.kinds: list[str] = []  # "poll" or "report", each heartbeat in turn
        self.heartbeats = 0
        self.polls_with_orders = 0  # heartbeats without reports answered with orders
        self.status: int | None = None  # answer everything with this status
        self.changed = asyncio.Event()
        self.acks: list[tuple[str, int, PreemptedAck]] = []  # (worker, task, acknowledgement)
        self.ack_status = 200
        # Orders the next poll is answered with once the event is set, whatever happens meanwhile: a reply read
        # before the reports that came after it.
        self.late: tuple[list, asyncio.Event] | None = None

    def assign(self, task_id: int, worker: str, command: list[str], start: bool = False) -> None:
        """`start`: an independent task's build, which starts it; without, it waits for a start order (a gang's)."""
        build = BuildOrder(task_id=task_id, attempt=0, job_id=1, task_index=0, command=command, env={},
                           grace_period=0.5, start=start)
        self.tasks[task_id] = {"state": "ASSIGNED", "worker": worker, "build": build}
        self.changed.set()

    def stop(self, task_id: int) -> None:
        self.tasks[task_id]["state"] = "TERMINATING"
        self.changed.set()

    def preempt(self, task_id: int) -> None:
        self.tasks[task_id]["state"] = "PREEMPTING"
        self.changed.set()

    def orders(self, worker: str, holding: frozenset = frozenset()) -> list:
        """As the controller's: none of a build the heartbeat says its worker holds."""
        orders = []
        for task_id, task in self.tasks.items():
            if task["worker"] != worker:
                continue
            if task["state"] == "ASSIGNED":
                if (task_id, task["build"].attempt) in holding:
                    continue
                orders.append(task["build"])
            elif task["state"] == "STARTING":
                orders.append(StartOrder(task_id=task_id, attempt=0))
            elif task["state"] == "TERMINATING":
                orders.append(StopOrder(task_id=task_id, attempt=0, grace_period=0.5))
            elif task["state"] == "PREEMPTING":
                orders.append(PreemptOrder(task_id=task_id, attempt=0, epoch=3, grace_period=0.5))
        return orders

    def states(self, task_id: int) -> list[str]:
        return [r.state for _, r in self.reports if r.task_id == task_id]

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if self.status is not None:
            return httpx.Response(self.status, text="no")
        path = request.url.path.removeprefix("/api/v1/workers")
        if self.down:
            self.missed += 1
            if path.endswith("/heartbeat") and json.loads(request.content)["reports"]:
                self.missed_reports += 1
            raise httpx.ConnectError("connection refused", request=request)
        assert request.headers["authorization"] == "Bearer secret"
        if path == "":
            worker = f"w{len(self.registrations) + 1}"
            self.registrations.append((worker, RegisterRequest.model_validate_json(request.content)))
            return httpx.Response(200, json=RegisterReply(worker_id=worker, heartbeat_interval=0.1).model_dump())
        worker, kind, *rest = path.strip("/").split("/")
        if kind == "logs":
            task_id, attempt, stream = rest
            key = (int(task_id), int(attempt), stream)
            assert int(request.url.params["offset"]) == len(self.logs[key])
            self.logs[key] += request.content
            return httpx.Response(204)
        if worker in self.lost:
            return httpx.Response(409, text=f"worker {worker} was declared lost")
        if kind == "tasks":
            task_id, what = rest
            assert what == "preempted"
            self.acks.append((worker, int(task_id), PreemptedAck.model_validate_json(request.content)))
            if self.ack_status == 200:
                self.tasks[int(task_id)]["state"] = "PREEMPTED"
            return httpx.Response(self.ack_status, json={"detail": "epoch 3 is not current"})
        body = HeartbeatRequest.model_validate_json(request.content)
        self.heartbeats += 1
        if self.late is not None and not body.reports:
            (orders, answer), self.late = self.late, None
            await answer.wait()
            return httpx.Response(200, json=HeartbeatReply(orders=orders, heartbeat_interval=0.1).model_dump())
        if body.pythons is not None:
            self.pythons.append(body.pythons)
        if body.gpus is not None:
            self.gpu_readings.append(body.gpus)
        self.holdings.append(set(body.holding))
        self.kinds.append("report" if body.reports else "poll")
        if body.reports:
            self.batches.append([(r.task_id, r.state) for r in body.reports])
        for report in body.reports:
            self.reports.append((worker, report))
            task = self.tasks[report.task_id]
            task["state"] = "STARTING" if report.state == "PREPARED" else report.state
            if report.state in TASK_TERMINAL:
                self.logs_at_end[report.task_id] = dict(self.logs)
        holding = frozenset(body.holding)
        orders = self.orders(worker, holding)
        if not orders and body.wait:
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), body.wait)
            orders = self.orders(worker, holding)
        self.polls_with_orders += bool(orders and not body.reports)
        if self.down_after_orders and orders:  # a long poll outstanding when the test went down leaves it down
            self.down = True
        return httpx.Response(200, json=HeartbeatReply(orders=orders, heartbeat_interval=0.1).model_dump())


@contextlib.asynccontextmanager
async def running_agent(controller: FakeController, tmp_path):
    options = WorkerOptions(controller_url=URL, token="secret", name="box", work_dir=tmp_path, cpus=3,
                            memory=2**30, gpus=0, labels={"zone": "a"}, heartbeat_interval=0.1)
    async with httpx.AsyncClient(transport=httpx.MockTransport(controller.handle), base_url=URL,
                                 headers={"Authorization": "Bearer secret"}) as http:
        agent = Agent(options, http)
        serving = asyncio.create_task(agent.serve())
        try:
            yield agent, serving
        finally:
            serving.cancel()
            await asyncio.gather(serving, return_exceptions=True)
            await agent.runner.shutdown()


@pytest.fixture
def controller():
    return FakeController()


def remembered(agent: Agent) -> set[tuple[int, int]]:
    """The attempts the runner keeps orders or an end of."""
    return set(agent.runner._acted) | agent.runner._ended


async def polls_later(controller: FakeController, polls: int = 3) -> None:
    seen = controller.heartbeats
    await wait_until(lambda: controller.heartbeats >= seen + polls, what=f"{polls} heartbeats more")


def pids_in(path) -> list[int] | None:
    values = path.read_text().split() if path.exists() else []
    return [int(v) for v in values] if len(values) == 2 else None


async def test_a_task_runs_from_order_to_report_with_its_logs_there_before_its_end(controller, tmp_path):
    async with running_agent(controller, tmp_path):
        await wait_until(lambda: controller.registrations, what="registration")
        worker, request = controller.registrations[0]
        assert (request.name, request.address, request.labels) == ("box", "127.0.0.1", {"zone": "a"})
        assert (request.capacity.cpu, request.capacity.memory, request.capacity.gpu) == (3, 2**30, 0)
        controller.assign(1, worker, ["sh", "-c", "echo hello; echo warn >&2"])
        await wait_until(lambda: "SUCCEEDED" in controller.states(1), what="the task to succeed")
    assert controller.states(1) == ["BUILDING", "PREPARED", "RUNNING", "SUCCEEDED"]
    assert controller.logs_at_end[1] == {(1, 0, "stdout"): b"hello\n", (1, 0, "stderr"): b"warn\n"}


async def test_a_task_s_lines_at_info_are_its_orders_its_start_with_its_pid_and_its_end(controller, tmp_path,
                                                                                          caplog):
    caplog.set_level(logging.INFO, logger="corral.worker")
    async with running_agent(controller, tmp_path):
        await wait_until(lambda: controller.registrations, what="registration")
        controller.assign(1, controller.registrations[0][0], ["true"])
        await wait_until(lambda: "SUCCEEDED" in controller.states(1), what="the task to succeed")
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO and "task=1 " in r.getMessage()]
    orders = [line for line in lines if line.startswith("task=1 attempt=0 order ")]
    assert orders and lines[:len(orders)] == orders, lines  # each order the worker took (here a build, a start)
    assert len(lines) == len(orders) + 2 and lines[-2].startswith("task=1 attempt=0 running pid="), lines
    assert lines[-1] == "task=1 attempt=0 SUCCEEDED exit_code=0 reason=None"


async def test_the_pythons_found_after_registering_come_in_one_heartbeat(controller, tmp_path, monkeypatch):
    """Finding interpreters takes uv seconds: registration does not wait for it."""
    found = asyncio.Event()

    def slow_discovery(nice: bool = False):
        assert nice  # it yields the CPU to running tasks
        asyncio.run_coroutine_threadsafe(asyncio.wait_for(found.wait(), 30), loop).result()
        return [Interpreter("3.11.7", sys.executable), Interpreter("3.12.1", "/usr/bin/python3.12")]

    loop = asyncio.get_running_loop()
    monkeypatch.setattr("corral.worker.agent.discover_pythons", slow_discovery)
    async with running_agent(controller, tmp_path):
        await wait_until(lambda: controller.registrations, what="registration, before any Python is found")
        own = ".".join(map(str, sys.version_info[:3]))
        assert controller.registrations[0][1].pythons == [own] and controller.pythons == []
        found.set()
        await wait_until(lambda: controller.pythons, what="a heartbeat with the Pythons found")
        seen = controller.heartbeats
        await wait_until(lambda: controller.heartbeats > seen + 3, what="more heartbeats")
    assert controller.pythons == [["3.11.7", "3.12.1"]]  # sent once


async def test_heartbeats_carry_the_use_of_the_devices_nvml_sees_and_not_of_virtual_ones(controller, tmp_path,
                                                                                          monkeypatch):
    devices = [GpuDevice(index=0, model="NVIDIA H100", memory=80 * 2**30, uuid="GPU-a"),
               GpuDevice(index=1, model="virtual")]
    reading = GpuUse(index=0, memory_used=2**30, memory_total=80 * 2**30, utilization=7)
    metered: list[list[int]] = []

    class Meter:
        def __init__(self, indices):
            self.indices = indices
            metered.append(indices)

        def read(self):
            return [reading]

    monkeypatch.setattr("corral.worker.agent.detect_capacity", lambda *args, **kwargs: (
        Capacity(cpu=3, memory=2**30, gpu=2), devices))
    monkeypatch.setattr("corral.worker.agent.GpuMeter", Meter)
    async with running_agent(controller, tmp_path):
        await wait_until(lambda: len(controller.gpu_readings) >= 2, what="two heartbeats with readings")
    assert metered == [[0]] and controller.gpu_readings[:2] == [[reading]] * 2


async def test_registration_waits_for_a_controller_that_is_down(controller, tmp_path):
    controller.down = True
    async with running_agent(controller, tmp_path):
        await wait_until(lambda: controller.missed >= 3, what="registration attempts to fail")
        assert controller.registrations == []
        controller.down = False
        await wait_until(lambda: controller.registrations, what="registration once the controller is back")


@pytest.mark.parametrize("status", [401, 403, 422])
async def test_a_refusal_stops_the_worker_with_a_clear_error(controller, tmp_path, status):
    controller.status = status
    async with running_agent(controller, tmp_path) as (_, serving):
        with pytest.raises(WorkerError, match=f"HTTP {status}"):
            await asyncio.wait_for(serving, 5)


async def test_reports_made_during_an_outage_are_delivered_after_it_in_order_and_once(controller, tmp_path):
    async with running_agent(controller, tmp_path):
        await wait_until(lambda: controller.registrations, what="registration")
        controller.down_after_orders = True
        controller.assign(1, "w1", ["true"])
        await wait_until(lambda: controller.missed_reports >= 2, what="reports to meet the outage")
        assert controller.reports == []
        controller.down_after_orders = controller.down = False
        await wait_until(lambda: "SUCCEEDED" in controller.states(1), what="the reports after the outage")
    assert controller.states(1) == ["BUILDING", "PREPARED", "RUNNING", "SUCCEEDED"]
    assert {w for w, _ in controller.reports} == {"w1"} and len(controller.registrations) == 1


async def test_a_task_keeps_running_through_an_outage_and_its_end_is_reported_after(controller, tmp_path):
    go = tmp_path / "go"
    async with running_agent(controller, tmp_path) as (agent, _):
        await wait_until(lambda: controller.registrations, what="registration")
        controller.assign(1, "w1", ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.02; done; echo done"])
        await wait_until(lambda: "RUNNING" in controller.states(1), what="the task to run")
        controller.down = True
        go.touch()
        stdout = tmp_path / "tasks" / "1-0" / "stdout"
        await wait_until(lambda: stdout.exists() and stdout.read_bytes() == b"done\n" and controller.missed >= 3,
                         what="the outage")
        controller.down = False
        await wait_until(lambda: "SUCCEEDED" in controller.states(1), what="the report after the outage")
    assert controller.logs_at_end[1][(1, 0, "stdout")] == b"done\n"
    assert {w for w, _ in controller.reports} == {"w1"} and len(controller.registrations) == 1


async def test_a_worker_declared_lost_kills_its_tasks_and_registers_again(controller, tmp_path):
    pids = tmp_path / "pids"
    async with running_agent(controller, tmp_path) as (agent, _):
        await wait_until(lambda: controller.registrations, what="registration")
        controller.assign(1, "w1", ["sh", "-c", f"sleep 100 & echo $! > {pids}; echo $$ >> {pids}; wait"])
        grandchild, child = await wait_until(lambda: pids_in(pids), what="the task to start")
        await wait_until(lambda: "RUNNING" in controller.states(1), what="the task to run")
        controller.lost.add("w1")
        await wait_until(lambda: len(controller.registrations) == 2, what="a new registration")
        # The task's own process has ended; the rest of its cgroup was signalled with it, and may still be dying
        await wait_until(lambda: gone(child) and gone(grandchild), what="every process of the old task to end")
        assert controller.registrations[1][1].running == []
        assert remembered(agent) == set()  # no order to the lost identity is taken: none can repeat
        controller.assign(2, "w2", ["true"])
        await wait_until(lambda: "SUCCEEDED" in controller.states(2), what="work under the new identity")
    assert controller.states(1) == ["BUILDING", "PREPARED", "RUNNING"]  # no report of the old task's end
    assert agent.worker_id == "w2"


async def test_a_stop_order_reaches_the_running_task(controller, tmp_path):
    async with running_agent(controller, tmp_path):
        await wait_until(lambda: controller.registrations, what="registration")
        controller.assign(1, "w1", ["sleep", "100"])
        await wait_until(lambda: "RUNNING" in controller.states(1), what="the task to run")
        controller.stop(1)
        await wait_until(lambda: "KILLED" in controller.states(1), what="the task to be killed")
    assert controller.reports[-1][1].reason == "cancelled"


@pytest.mark.parametrize("status", [200, 409])
async def test_a_preempted_task_is_acknowledged_with_its_epoch_and_a_refusal_is_dropped(controller, tmp_path, status):
    controller.ack_status = status
    async with running_agent(controller, tmp_path) as (agent, _):
        await wait_until(lambda: controller.registrations, what="registration")
        controller.assign(1, "w1", ["sleep", "100"])
        await wait_until(lambda: "RUNNING" in controller.states(1), what="the task to run")
        controller.preempt(1)
        await wait_until(lambda: controller.acks, what="the acknowledgement")
        controller.assign(2, "w1", ["true"])  # the worker carries on: a 409 here is not "you are lost"
        await wait_until(lambda: "SUCCEEDED" in controller.states(2), what="the next task")
        await polls_later(controller)
        # A refused acknowledgement leaves the preemption ordered: it is still known, and still not acted on again.
        assert remembered(agent) == (set() if status == 200 else {(1, 0)})
    (worker, task_id, ack), = controller.acks
    assert (worker, task_id, ack.attempt, ack.epoch, ack.exit_code) == ("w1", 1, 0, 3, 143)
    assert "PREEMPTED" not in controller.states(1)  # an acknowledgement is not a heartbeat report
    assert len(controller.registrations) == 1


async def test_the_runner_forgets_each_attempt_once_the_controller_has_its_end(controller, tmp_path):
    """What marks an attempt's orders acted on would otherwise stay for the worker's life: an attempt's worth for
    every attempt it ran."""
    async with running_agent(controller, tmp_path) as (agent, _):
        await wait_until(lambda: controller.registrations, what="registration")
        for task_id in range(1, 31):
            controller.assign(task_id, "w1", ["true"], start=task_id % 2 == 0)  # built and started, or started too
        controller.stop(30)  # one ended by a stop, perhaps before its build
        await wait_until(lambda: all(set(controller.states(t)) & TASK_TERMINAL for t in range(1, 31)),
                         what="every task to end")
        await polls_later(controller)
        assert remembered(agent) == set()
    assert all(len(set(controller.states(t)) & TASK_TERMINAL) == 1 for t in range(1, 31))


async def test_an_order_read_before_an_end_was_delivered_is_not_acted_on_when_answered_after_it(controller,
                                                                                              tmp_path):
    """The poll outstanding as an end is delivered may carry an order the controller gave before it had the end."""
    go = tmp_path / "go"
    async with running_agent(controller, tmp_path) as (agent, _):
        await wait_until(lambda: controller.registrations, what="registration")
        controller.assign(1, "w1", ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.02; done"], start=True)
        await wait_until(lambda: "RUNNING" in controller.states(1), what="the task to run")
        answer = asyncio.Event()
        controller.late = ([StopOrder(task_id=1, attempt=0, grace_period=0.5)], answer)
        controller.changed.set()  # the poll waiting now is answered, and the next one is the late one
        await wait_until(lambda: controller.late is None, what="the late poll")
        go.touch()
        await wait_until(lambda: "SUCCEEDED" in controller.states(1), what="the task's end")
        answer.set()
        await polls_later(controller)
        assert remembered(agent) == set()
    assert controller.states(1) == ["BUILDING", "PREPARED", "RUNNING", "SUCCEEDED"]


def test_the_address_on_a_loopback_controller_is_loopback():
    assert route_address("http://localhost:8265") == "127.0.0.1"
    assert route_address("http://127.0.0.1:8265") == "127.0.0.1"


async def test_heartbeats_say_which_attempts_the_worker_holds_until_their_ends_are_delivered(controller, tmp_path):
    """So that the controller need not build their orders again for every reply until their reports are in."""
    async with running_agent(controller, tmp_path):
        await wait_until(lambda: controller.registrations, what="registration")
        worker = controller.registrations[0][0]
        controller.assign(1, worker, [sys.executable, "-c", "import time; time.sleep(60)"], start=True)
        await wait_until(lambda: "RUNNING" in controller.states(1), what="the task to run")
        seen = len(controller.holdings)
        await wait_until(lambda: len(controller.holdings) > seen, what="a heartbeat after its RUNNING")
        assert controller.holdings[-1] == {(1, 0)}
        controller.stop(1)
        await wait_until(lambda: "KILLED" in controller.states(1), what="the task to be stopped")
        await wait_until(lambda: controller.holdings[-1] == set(), what="a heartbeat after its end was delivered")


async def test_an_outbox_longer_than_a_heartbeat_may_carry_goes_out_in_several(controller, tmp_path):
    async with running_agent(controller, tmp_path) as (agent, serving):
        await wait_until(lambda: controller.registrations, what="registration")
        controller.tasks[1] = {"state": "RUNNING", "worker": "elsewhere", "build": None}
        controller.down = True
        for attempt in range(MAX_REPORTS + 5):
            agent._queue(TaskReport(task_id=1, attempt=attempt, state=TaskState.RUNNING, at=1.0))
        controller.down = False
        await wait_until(lambda: len(controller.reports) == MAX_REPORTS + 5 or serving.done(), what="every report")
        assert not serving.done()
    assert [r.attempt for _, r in controller.reports] == list(range(MAX_REPORTS + 5))


async def test_a_relay_order_is_dialed_back_with_the_join_token_and_served(controller, tmp_path):
    seen: dict = {}
    done = asyncio.Event()

    async def relay(connection) -> None:
        seen["path"], seen["auth"] = connection.request.path, connection.request.headers["Authorization"]
        seen["frames"] = [frame async for frame in connection]
        seen["close"] = connection.close_code
        done.set()

    async with serve(relay, "127.0.0.1", 0) as server, running_agent(controller, tmp_path) as (agent, _):
        port = server.sockets[0].getsockname()[1]
        await wait_until(lambda: controller.registrations, what="registration")
        controller.assign(1, agent.worker_id, ["sleep", "60"])
        await wait_until(lambda: "RUNNING" in controller.states(1), what="the task to run")
        order = RelayOrder(session="s" * 20, task_id=1, attempt=0, kind="exec", command=["echo", "via-relay"],
                           url=f"http://127.0.0.1:{port}/")
        agent._dispatch(agent.worker_id, HeartbeatReply(orders=[order], heartbeat_interval=0.1))
        async with asyncio.timeout(10):
            await done.wait()
    assert seen["path"] == f"/api/v1/relay/{'s' * 20}?worker={agent.worker_id}"
    assert seen["auth"] == "Bearer secret"
    assert seen["frames"] == [bytes([STDOUT]) + b"via-relay\n", '{"type":"exit","code":0,"reason":null}']
    assert seen["close"] == 1000


async def test_a_task_with_nothing_to_build_reports_building_prepared_and_running_in_one_heartbeat(controller,
                                                                                                  tmp_path):
    async with running_agent(controller, tmp_path) as (agent, _):
        agent.linger = 30.0  # longer than any spawn here: the RUNNING report, not the time limit, ends the wait
        await wait_until(lambda: controller.registrations, what="registration")
        controller.assign(1, "w1", ["sleep", "60"], start=True)
        await wait_until(lambda: "RUNNING" in controller.states(1), what="the task to run")
    assert controller.batches[0] == [(1, "BUILDING"), (1, "PREPARED"), (1, "RUNNING")]


async def test_a_wave_s_start_reports_go_together(controller, tmp_path):
    async with running_agent(controller, tmp_path) as (agent, _):
        agent.linger, agent.starts_linger = 1.0, 30.0
        await wait_until(lambda: controller.registrations, what="registration")
        for task_id in range(1, 9):
            controller.assign(task_id, "w1", ["sleep", "60"], start=True)
        await wait_until(lambda: all("RUNNING" in controller.states(t) for t in range(1, 9)), what="the tasks to run")
    assert sorted(controller.batches[0]) == sorted((t, s) for t in range(1, 9) for s in ("BUILDING", "PREPARED",
                                                                                        "RUNNING"))


def _report(task_id: int, state: TaskState) -> TaskReport:
    return TaskReport(task_id=task_id, attempt=0, state=state, at=0.0)


async def test_reports_wait_while_attempts_are_being_started_and_while_an_end_is_on_its_way(controller, tmp_path):
    """A RUNNING report waits, though it is not of a PASSING state, while the runner is starting attempts (each report
    coming within `linger` of the one before, up to `starts_linger`) and then while an exited attempt's end is being
    made; with neither it goes at once."""
    options = WorkerOptions(controller_url=URL, token="secret", work_dir=tmp_path, cpus=1, memory=2**30, gpus=0)
    async with httpx.AsyncClient(transport=httpx.MockTransport(controller.handle), base_url=URL) as http:
        agent = Agent(options, http)
        agent.linger, agent.starts_linger = 1.0, 30.0
        now = {"starting": True, "ending": False}
        agent.runner.starting = lambda: now["starting"]
        agent.runner.ending = lambda: now["ending"]
        agent._queue(_report(1, TaskState.RUNNING))
        lingering = asyncio.create_task(agent._linger())
        for task_id in range(2, 6):
            await asyncio.sleep(0.05)
            agent._queue(_report(task_id, TaskState.RUNNING))
        await asyncio.sleep(0.05)
        assert not lingering.done()
        now["starting"], now["ending"] = False, True
        agent._queue(_report(6, TaskState.RUNNING))
        await asyncio.sleep(0.05)
        assert not lingering.done()
        now["ending"] = False
        agent._queue(_report(1, TaskState.SUCCEEDED))
        async with asyncio.timeout(0.5):
            await lingering
        async with asyncio.timeout(0.5):
            await agent._linger()  # a RUNNING report waiting, nothing being started or ending: at once


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="Python 3.12 waits for children through pidfds by itself")
async def test_the_worker_waits_for_its_tasks_through_a_pidfd_not_a_thread_each():
    before = asyncio.get_child_watcher()
    try:
        watch_children_by_pidfd()
        threads = threading.active_count()
        process = await asyncio.create_subprocess_exec("sleep", "0.2")
        assert threading.active_count() == threads
        assert await process.wait() == 0
    finally:
        asyncio.set_child_watcher(before)


async def test_after_new_orders_the_poller_waits_for_their_reports_rather_than_be_sent_them_again(controller,
                                                                                                  tmp_path):
    """Until the reports of an order arrive the controller answers a poll at once with the same order."""
    async with running_agent(controller, tmp_path) as (agent, _):
        agent.linger = agent.settle = 30.0  # the reports go with RUNNING; the poller waits for them, not the time
        await wait_until(lambda: controller.registrations, what="registration")
        controller.assign(1, "w1", ["sleep", "60"], start=True)
        await wait_until(lambda: "RUNNING" in controller.states(1), what="the task to run")
        seen = controller.heartbeats
        await wait_until(lambda: controller.heartbeats > seen, what="a poll after the reports")
    assert controller.polls_with_orders == 1


async def test_after_builds_alone_the_poller_polls_again_at_once_holding_them(controller, tmp_path):
    """The controller gives no build to a heartbeat that holds it: the poll after a wave's builds waits for newer
    orders rather than for the wave's reports, and is outstanding when they come."""
    async with running_agent(controller, tmp_path) as (agent, _):
        agent.settle = 30.0
        await wait_until(lambda: controller.registrations, what="registration")
        controller.assign(1, "w1", ["sleep", "60"], start=True)
        await wait_until(lambda: "RUNNING" in controller.states(1), what="the task to run")
        controller.assign(2, "w1", ["sleep", "60"], start=True)
        await wait_until(lambda: "RUNNING" in controller.states(2), what="the second task to run")
    first = controller.kinds.index("report")
    assert controller.kinds[first - 1] == "poll" and (1, 0) in controller.holdings[first - 1]
    assert controller.polls_with_orders == 2  # one for each build, none again


def test_the_worker_s_log_lines_are_written_by_a_thread_of_their_own_in_order_and_whole():
    written: list[tuple[str, threading.Thread]] = []

    class Recorder(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            written.append((self.format(record), threading.current_thread()))

    recorder = Recorder()
    recorder.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    kept = root.handlers[:]
    root.handlers = [recorder]
    try:
        log = logging.getLogger("corral.worker.test")
        with logs_written_in_background():
            assert root.handlers != [recorder]
            items = ["a"]
            log.warning("task=%s got %s", 1, items)
            items.append("b")  # after the call: the line keeps what it said
            try:
                raise ValueError("boom")
            except ValueError:
                log.exception("task=%s failed", 2)
        assert root.handlers == [recorder]
    finally:
        root.handlers = kept
    assert [line.splitlines()[0] for line, _ in written] == [
        "WARNING corral.worker.test task=1 got ['a']", "ERROR corral.worker.test task=2 failed"]
    assert "ValueError: boom" in written[1][0]
    assert all(thread is not threading.current_thread() for _, thread in written)


def test_the_worker_s_log_records_are_handed_to_the_thread_as_they_were_made_not_copied():
    made: list[logging.LogRecord] = []
    written: list[logging.LogRecord] = []

    class Recorder(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            written.append(record)

    root = logging.getLogger()
    kept = root.handlers[:]
    root.handlers = [Recorder()]
    log = logging.getLogger("corral.worker.test")
    log.addFilter(lambda record: made.append(record) or True)
    try:
        with logs_written_in_background():
            log.warning("task=%s attempt=%s report %s", 1, 0, "RUNNING")
    finally:
        root.handlers = kept
        log.filters.clear()
    assert written == made and written[0] is made[0]
    assert (written[0].msg, written[0].args) == ("task=1 attempt=0 report RUNNING", None)
