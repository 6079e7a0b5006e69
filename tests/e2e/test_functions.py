"""End to end: Python functions as jobs, jobs launched from tasks, and the cancel cascade."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import cloudpickle
import psutil
import pytest

import corral
from corral import AsyncClient, Client, CorralError
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e
# The workers cannot import this test module: ship its functions by value, as a script's would be.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster(module_cluster):
    return module_cluster


@pytest.fixture
def client(cluster):
    with Client(cluster.url, cluster.admin_token) as api:
        yield api


def square(x):
    return x * x


def fail(message):
    raise ValueError(message)


def index_times(factor):
    return corral.current().task_index * factor


def child_of(n):
    return {"n": n, "job": corral.current().job_id}


def driver():
    """Launches two children through its own job's client and collects their results."""
    here = corral.current()
    children = [here.client.submit(child_of, n, options={"name": f"child{n}"}) for n in range(2)]
    return {"driver": here.job_id, "children": [c.id for c in children],
            "results": [c.result(timeout=120) for c in children]}


def sleeper():
    print(os.getpid(), flush=True)
    time.sleep(600)


def sleeping_driver():
    here = corral.current()
    for _ in range(2):
        here.client.submit(sleeper)
    time.sleep(600)


def failing_driver():
    here = corral.current()
    child = here.client.submit(sleeper)
    deadline = time.monotonic() + 60  # shipped by value to a worker: tests.waiting is not importable there
    while here.client.get(child.id).state != "RUNNING":
        assert time.monotonic() < deadline, f"timed out after 60s waiting for job {child.id} to run"
        time.sleep(0.05)
    raise RuntimeError("the driver gives up")


def token_facts(other_job: int):
    """What a task's token may and may not do."""
    here = corral.current()
    facts = {"token_is_the_jobs_own": os.environ["CORRAL_TOKEN"].startswith(f"cj_{here.job_id}_")}
    try:
        here.client.get(other_job)
    except CorralError as error:
        facts["other_job"] = (error.status, str(error))
    try:
        here.client.workers()
    except CorralError as error:
        facts["workers"] = error.status
    facts["own_job"] = here.client.get(here.job_id).id
    return facts


def test_a_function_returns_its_value(client):
    job = client.submit(square, 7, options={"name": "sq"})
    assert job.result(timeout=60) == 49
    assert job.wait(timeout=60).state == "SUCCEEDED"
    assert job.view.name == "sq"


def test_a_raising_function_raises_here_with_its_remote_traceback(client):
    job = client.submit(fail, "bad input")
    with pytest.raises(ValueError) as raised:
        job.result(timeout=60)
    assert str(raised.value) == "bad input"
    remote = raised.value.remote_traceback
    assert "corral/function.py" not in remote  # the traceback starts in the user's function
    assert "in fail" in remote and 'raise ValueError(message)' in remote
    assert any("remote traceback" in note for note in raised.value.__notes__)
    assert client.wait(job.id, timeout=60).state == "FAILED"


def test_four_replicas_give_four_results_in_task_order(client):
    job = client.submit(index_times, 10, replicas=4, resources={"cpu": 0.5})
    assert job.result(timeout=60) == [0, 10, 20, 30]


def test_a_result_over_the_limit_is_refused_with_a_clear_error(client):
    job = client.submit(bytes, 17 * 2**20)
    with pytest.raises(Exception, match="over the controller's limit") as raised:
        job.result(timeout=60)
    assert type(raised.value).__name__ == "ResultTooLarge"


def test_a_driver_launches_two_children_and_waits_for_them(client):
    job = client.submit(driver, options={"name": "sweep"})
    out = job.result(timeout=120)
    assert out["driver"] == job.id
    assert out["results"] == [{"n": 0, "job": out["children"][0]}, {"n": 1, "job": out["children"][1]}]
    children = sorted(client.list(launched_by=job.id), key=lambda j: j.id)
    assert [(c.id, c.launched_by, c.name) for c in children] == [
        (out["children"][0], job.id, "sweep/child0"), (out["children"][1], job.id, "sweep/child1")]


def test_cancelling_the_driver_cancels_its_children_and_their_processes(client):
    job = client.submit(sleeping_driver)
    children = wait_for(lambda: len(kids := list(client.list(launched_by=job.id))) == 2 and kids, 60,
                        "the driver to launch two children")
    pids = [int(wait_for(lambda c=c: b"".join(client.logs(c.id)).strip(), 60, f"job {c.id} to print its pid"))
            for c in children]
    client.cancel(job.id)
    for child in children:
        assert client.wait(child.id, timeout=60).state == "CANCELLED"
        causes = [h.message for h in client.history(child.id) if h.handler == "CancelLaunched"]
        assert causes == [f"cancelled: the job that launched it (job {job.id}) was cancelled"]
    assert client.wait(job.id, timeout=60).state == "CANCELLED"
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_failing_driver_cancels_its_running_child(client):
    job = client.submit(failing_driver)
    with pytest.raises(RuntimeError, match="the driver gives up"):
        job.result(timeout=60)
    (child,) = list(client.list(launched_by=job.id))
    assert client.wait(child.id, timeout=60).state == "CANCELLED"
    causes = [h.message for h in client.history(child.id) if h.handler == "CancelLaunched"]
    assert causes == [f"cancelled: the job that launched it (job {job.id}) ended FAILED"]


def test_a_tasks_token_reaches_its_own_launch_tree_only(client, cluster):
    other = cluster.submit(command=["true"])
    facts = client.submit(token_facts, other).result(timeout=60)
    assert facts["token_is_the_jobs_own"]
    assert facts["other_job"][0] == 403 and f"not job {other}" in facts["other_job"][1]
    assert facts["workers"] == 401
    assert facts["own_job"] > other


def test_a_wrong_token_is_an_authentication_error(cluster):
    with Client(cluster.url, "not-the-token") as api, pytest.raises(CorralError, match="authentication") as raised:
        api.get(1)
    assert raised.value.status == 401


def sync_scenario(api: Client) -> list:
    out = [api.submit(index_times, 3, replicas=2, resources={"cpu": 0.5}).result(timeout=60)]
    try:
        api.submit(fail, "same").result(timeout=60)
    except ValueError as error:
        out.append(("raised", str(error)))
    job = api.submit({"command": ["true"], "name": "plain"})
    out.append((api.wait(job.id, timeout=60).state, [t.state for t in api.tasks(job.id)]))
    out.append([j.name for j in api.list(limit=3)])
    return out


async def async_scenario(api: AsyncClient) -> list:
    out = [await (await api.submit(index_times, 3, replicas=2, resources={"cpu": 0.5})).result(timeout=60)]
    try:
        await (await api.submit(fail, "same")).result(timeout=60)
    except ValueError as error:
        out.append(("raised", str(error)))
    job = await api.submit({"command": ["true"], "name": "plain"})
    out.append(((await api.wait(job.id, timeout=60)).state, [t.state for t in await api.tasks(job.id)]))
    out.append([j.name async for j in api.list(limit=3)])
    return out


def test_the_async_client_and_the_sync_client_give_the_same_results(client, cluster):
    expected = sync_scenario(client)
    assert expected[0] == [0, 3] and expected[1] == ("raised", "same")

    async def run() -> list:
        async with AsyncClient(cluster.url, cluster.admin_token) as api:
            return await async_scenario(api)

    assert asyncio.run(run()) == expected


def test_the_cli_inside_a_task_launches_children_of_its_job(client, cluster):
    job_id = cluster.submit(command=[sys.executable, "-m", "corral", "submit", "--name", "inner", "--", "true"],
                            name="outer")
    assert cluster.wait_end(job_id, timeout=120)["state"] == "SUCCEEDED", cluster.logs(job_id, stream="stderr")
    (child,) = list(client.list(launched_by=job_id))
    assert child.name == "outer/inner"
