"""Interactive jobs on a real GPU worker: run by hand on a machine with an NVIDIA GPU (never in CI, not in
`make bench`, which must run without one).

On a local cluster of one worker that finds its GPUs through NVML:
- `corral shell --gpus 1` reaches a prompt on the GPU, sees its device (CUDA_VISIBLE_DEVICES, nvidia-smi, torch),
  holds GPU memory in a process that Ctrl-C interrupts without ending the shell, and exits with its code;
- meanwhile `corral exec` into that job sees the process and its memory on the device;
- `corral exec` into a GPU batch job runs beside it on the same device;
- `corral port-forward` reaches TensorBoard in a job holding a share of the GPU, 50 requests at once.

Prints one line per check (ok or FAIL) and exits non-zero if any failed.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pexpect

PY = sys.executable
PROMPT = "GPU> "
HOLD = ("import torch,time; x=torch.ones(1<<28, device='cuda'); "
        "print('holding', x.numel()*4>>20, 'MiB', flush=True); time.sleep(600)")
failures: list[str] = []


def check(name: str, ok: bool, detail: str = "") -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
    if not ok:
        failures.append(name)


def corral(env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "corral", *args], env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.2)
    raise TimeoutError(what)


def task_running(env: dict, job_id: str) -> bool:
    done = corral(env, "info", job_id)
    return bool(re.search(r"RUNNING", done.stdout))


def shell_on_the_gpu(env: dict) -> None:
    start = time.perf_counter()
    child = pexpect.spawn(PY, ["-m", "corral", "shell", "--gpus", "1", "--no-workdir", "--env", f"PS1={PROMPT}",
                               "--", "bash", "--norc", "--noprofile", "-i"],
                          env=env, timeout=180, encoding="utf-8", dimensions=(40, 160))
    child.expect_exact(PROMPT)
    check("corral shell --gpus 1 reaches a prompt", True, f"{time.perf_counter() - start:.2f} s")
    child.sendline("echo CVD=$CUDA_VISIBLE_DEVICES JOB=$CORRAL_JOB_ID")
    child.expect(r"CVD=(\S*) JOB=(\d+)")
    devices, job_id = child.match.group(1), child.match.group(2)
    check("the shell's task holds one device", devices.isdigit(), f"CUDA_VISIBLE_DEVICES={devices}")
    child.sendline("nvidia-smi -L")
    child.expect(r"GPU 0: ([^\r\n]+)")
    check("nvidia-smi in the shell sees one GPU", True, child.match.group(1))
    child.sendline("python3 -c \"import torch; print('torch sees', torch.cuda.device_count(), "
                   "torch.cuda.get_device_name(0))\"")
    child.expect(r"torch sees (\d+) ([^\r\n]+)")
    check("torch in the shell sees exactly its device", child.match.group(1) == "1", child.match.group(2))
    child.sendline(f'python3 -c "{HOLD}"')
    child.expect(r"holding (\d+) MiB")
    seen = corral(env, "exec", job_id, "-T", "--", "nvidia-smi", "--query-compute-apps=pid,used_memory",
                  "--format=csv,noheader")
    check("corral exec into the shell's job sees the process holding GPU memory",
          seen.returncode == 0 and "MiB" in seen.stdout, (seen.stdout.strip() or seen.stderr.strip())[:200])
    child.sendintr()
    child.expect_exact(PROMPT)
    child.sendline("echo alive $((6 * 7))")
    child.expect_exact("alive 42")
    check("Ctrl-C interrupts the CUDA process, not the shell", True)
    child.sendline("exit 7")
    child.expect(pexpect.EOF)
    child.close()
    check("the shell's exit code comes back", child.exitstatus == 7, f"exit {child.exitstatus}")


def exec_into_a_gpu_batch_job(env: dict) -> None:
    job_id = corral(env, "submit", "--gpus", "1", "--no-workdir", "--", "python3", "-c", HOLD).stdout.strip()
    until(lambda: "holding" in corral(env, "logs", job_id).stdout, 180, "the batch job to hold GPU memory")
    seen = corral(env, "exec", job_id, "-T", "--", "sh", "-c",
                  "echo CVD=$CUDA_VISIBLE_DEVICES; nvidia-smi --query-gpu=name,memory.used --format=csv,noheader")
    check("corral exec into a GPU batch job runs on its device", seen.returncode == 0 and "CVD=" in seen.stdout,
          " | ".join(seen.stdout.split("\n")).strip()[:200] or seen.stderr[:200])
    corral(env, "cancel", job_id)


def tensorboard_through_a_port_forward(env: dict) -> None:
    logdir = tempfile.mkdtemp(prefix="tb-")
    job_id = corral(env, "submit", "--gpus", "0.5", "--no-workdir", "--", "python3", "-m", "tensorboard.main",
                    "--logdir", logdir, "--host", "127.0.0.1", "--port", "6006").stdout.strip()
    until(lambda: task_running(env, job_id), 120, "TensorBoard's task to run")
    forward = subprocess.Popen([PY, "-m", "corral", "port-forward", job_id, "16006:6006"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        print("  ", forward.stdout.readline().strip(), flush=True)

        def answers() -> bool:
            try:
                response = httpx.get("http://127.0.0.1:16006/", timeout=5)
            except httpx.HTTPError:
                return False
            return response.status_code == 200 and "tensorboard" in response.text.lower()

        until(answers, 120, "TensorBoard to answer through the forward")

        async def many() -> list[int]:
            async with httpx.AsyncClient(timeout=30) as http:
                replies = await asyncio.gather(*(http.get("http://127.0.0.1:16006/data/environment")
                                                 for _ in range(50)))
                return [reply.status_code for reply in replies]

        codes = asyncio.run(many())
        check("port-forward to TensorBoard on a GPU share answers 50 concurrent requests",
              codes == [200] * 50, f"{codes.count(200)}/50 answered 200")
    finally:
        forward.terminate()
        forward.wait(10)
        corral(env, "cancel", job_id)


def main() -> None:
    data = Path(tempfile.mkdtemp(prefix="corral-gpu-"))
    env = {**os.environ, "CORRAL_DATA_DIR": str(data), "PYTHONUNBUFFERED": "1", "TERM": "dumb"}
    log = (data / "up.log").open("w")
    up = subprocess.Popen([PY, "-m", "corral", "up", "--workers", "1", "--data-dir", str(data), "--port", "8377"],
                          env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        until(lambda: (data / "cluster.json").is_file() and json.loads((data / "cluster.json").read_text()), 60,
              "the cluster to start")
        until(lambda: "alive" in corral(env, "workers").stdout.lower(), 60, "its worker")
        print(corral(env, "workers", "--devices").stdout, flush=True)
        for step in (shell_on_the_gpu, exec_into_a_gpu_batch_job, tensorboard_through_a_port_forward):
            try:
                step(env)
            except Exception as error:  # one step's failure is reported; the next still runs
                check(step.__name__, False, f"{type(error).__name__}: {str(error)[:300]}")
    except Exception as error:
        check("the cluster starts", False, f"{type(error).__name__}: {error}")
    finally:
        up.terminate()
        up.wait(30)
        log.close()
        if failures:
            for path in [data / "up.log", *sorted((data / "logs").glob("*.log"))]:
                print(f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-40:]))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
