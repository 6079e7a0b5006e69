"""End to end: `corral shell`, `attach`, `exec` and `port-forward` on a real PTY (pexpect) through a real
controller and worker."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys

import httpx
import pexpect
import pytest

from corral.client.errors import CorralError
from corral.client.relay import Relay, run_terminal
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e
PY = sys.executable
PROMPT = "PROMPT> "


def corral_env(cluster, token: str | None = None) -> dict[str, str]:
    return {**os.environ, "CORRAL_URL": cluster.url, "CORRAL_TOKEN": token or cluster.admin_token,
            "SHELL": "/bin/sh", "PS1": PROMPT, "TERM": "dumb"}


def spawn(cluster, *args: str, rows: int = 24, cols: int = 80) -> pexpect.spawn:
    return pexpect.spawn(PY, ["-m", "corral", *args], env=corral_env(cluster), dimensions=(rows, cols),
                         timeout=60, encoding="utf-8", cwd=str(cluster.root))


def shell(cluster, *command: str) -> pexpect.spawn:
    """`corral shell` of a plain sh with a known prompt."""
    return spawn(cluster, "shell", "--no-workdir", "--env", f"PS1={PROMPT}", "--", *(command or ("/bin/sh",)))


def corral(cluster, *args: str, token: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "corral", *args], env=corral_env(cluster, token), capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_shell_prints_the_job_id_and_exits_with_the_commands_code(cluster):
    child = shell(cluster, "sh", "-c", "echo job=$CORRAL_JOB_ID; exit 3")
    child.expect(r"job=(\d+)")
    job_id = int(child.match.group(1))
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 3
    assert cluster.wait_end(job_id)["state"] in ("FAILED", "SUCCEEDED")


def test_ctrl_c_interrupts_a_sleep_but_not_the_shell_and_resizes_reach_stty(cluster):
    child = shell(cluster)
    child.expect_exact(PROMPT)
    child.sendline("sleep 100")
    child.sendintr()
    child.expect_exact(PROMPT)
    child.sendline("echo still $((40 + 2))")
    child.expect_exact("still 42")
    child.setwinsize(33, 111)
    child.sendline("stty size")
    child.expect_exact("33 111")
    child.sendline("exit 0")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_detach_then_attach_shows_the_same_session(cluster):
    child = shell(cluster)
    child.expect_exact(PROMPT)
    child.sendline("MARK=kept-$$")
    child.expect_exact(PROMPT)
    child.send("\x10\x11")
    child.expect(r"corral attach (\d+)")
    job_id = child.match.group(1)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    again = spawn(cluster, "attach", job_id)
    again.sendline("echo mark=$MARK")
    again.expect(r"mark=kept-\d+")
    again.sendline("exit 5")
    again.expect(pexpect.EOF)
    again.close()
    assert again.exitstatus == 5


def test_exec_into_a_running_batch_job(cluster):
    job_id = cluster.submit(command=["sh", "-c", "echo ready; sleep 300"], env={"SECRET_WORD": "swordfish"})
    cluster.wait_running(job_id)
    done = corral(cluster, "exec", str(job_id), "--", "sh", "-c", 'echo "$SECRET_WORD in $PWD"; echo oops >&2; exit 4')
    assert done.returncode == 4, done.stderr
    assert done.stdout.startswith("swordfish in /") and "oops" in done.stderr
    cluster.http.post(f"/api/v1/jobs/{job_id}/cancel")


def test_port_forward_serves_50_concurrent_requests(cluster):
    port = 18000 + os.getpid() % 1000
    job_id = cluster.submit(command=[PY, "-m", "http.server", str(port), "--bind", "127.0.0.1"])
    cluster.wait_running(job_id)
    forward = subprocess.Popen([PY, "-m", "corral", "port-forward", str(job_id), str(port)],
                               env=corral_env(cluster), stdout=subprocess.PIPE, text=True)
    try:
        line = forward.stdout.readline()
        local = re.search(r"forwarding (\S+):(\d+) ->", line)
        assert local, line
        url = f"http://{local.group(1)}:{local.group(2)}/"
        wait_for(lambda: _get(url) == 200, 30, "the task's server to answer through the forward")

        async def many() -> list[int]:
            async with httpx.AsyncClient(timeout=30) as http:
                return [r.status_code for r in await asyncio.gather(*(http.get(url) for _ in range(50)))]

        assert asyncio.run(many()) == [200] * 50
    finally:
        forward.terminate()
        forward.wait(10)
        cluster.http.post(f"/api/v1/jobs/{job_id}/cancel")


def _get(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=5).status_code
    except httpx.HTTPError:
        return None


def test_the_idle_timeout_ends_an_unattended_job(cluster):
    job_id = cluster.submit(command=["sh"], interactive=True, idle_timeout=2)
    cluster.wait_running(job_id)
    assert cluster.wait_end(job_id, timeout=60)["state"] != "SUCCEEDED"


def test_a_job_token_is_refused_on_another_jobs_terminal(cluster):
    victim = cluster.submit(command=["sh"], interactive=True)
    spy = cluster.submit(command=["sh", "-c", "echo $CORRAL_TOKEN; sleep 300"])
    cluster.wait_running(victim)
    cluster.wait_running(spy)
    token = wait_for(lambda: cluster.logs(spy).strip(), 30, "the spy's job token")

    async def attach() -> None:
        async with Relay(cluster.url, token).terminal(victim) as channel:
            await run_terminal(channel, None, sys.stdout.buffer, sys.stderr.buffer)

    with pytest.raises(CorralError) as refused:
        asyncio.run(attach())
    assert refused.value.status == 4403
    done = corral(cluster, "attach", str(victim), token=token)
    assert done.returncode == 1 and done.stderr.startswith("error: ") and "Traceback" not in done.stderr
    for job_id in (victim, spy):
        cluster.http.post(f"/api/v1/jobs/{job_id}/cancel")


def test_bad_requests_are_one_line(cluster):
    done = corral(cluster, "exec", "999999", "--", "true")
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and done.stderr.startswith("error: ")
    batch = cluster.submit(command=["sleep", "300"])
    cluster.wait_running(batch)
    done = corral(cluster, "attach", str(batch))
    assert done.returncode == 1 and done.stderr.startswith("error: ") and "Traceback" not in done.stderr
    cluster.http.post(f"/api/v1/jobs/{batch}/cancel")
