"""Shares of one GPU end to end: `corral submit --gpus 0.5` and the Python client through a real controller to a real
worker with virtual GPUs, and what each task's process sees."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

from corral import Client
from tests.waiting import wait_for

# Says what it sees, then holds its share until its release file appears (the job's time limit bounds the wait).
HOLD = 'echo "$CUDA_VISIBLE_DEVICES $CORRAL_GPU_SHARE"; until [ -e "$RELEASE" ]; do sleep 0.05; done'


def test_shares_pack_onto_one_device_and_a_whole_gpu_waits_until_the_shares_end(bare_cluster, tmp_path):
    cluster = bare_cluster
    cluster.start_worker("gpu-box", 4, "--gpus", "2")
    # The worker's log lines are written by a thread of their own: the line may follow the registration.
    wait_for(lambda: "GPU shares are cooperative" in cluster.log("gpu-box"), 10, "the note on shares in the log")
    env = {**os.environ, "CORRAL_URL": cluster.url, "CORRAL_TOKEN": cluster.admin_token}

    def submit(gpus: str, release: str, command: str) -> int:
        done = subprocess.run([sys.executable, "-m", "corral", "submit", "--gpus", gpus, "--no-workdir",
                               "--time-limit", "60s", "--env", f"RELEASE={tmp_path / release}", "--", "sh", "-c",
                               command], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return int(done.stdout)

    shares = [submit("0.5", f"release-{n}", HOLD) for n in range(3)]
    seen = {job: wait_for(lambda job=job: cluster.logs(job).strip(), 30, f"job {job} to say what it sees")
            for job in shares}
    devices = {job: line.split()[0] for job, line in seen.items()}
    assert all(line.split()[1] == "0.5" for line in seen.values()), seen
    assert sorted(Counter(devices.values()).values()) == [1, 2]  # two share one device, the third has the other
    whole = submit("1", "never", 'echo "$CUDA_VISIBLE_DEVICES [${CORRAL_GPU_SHARE-none}]"')
    job = wait_for(lambda: (j := cluster.job(whole))["pending_reason"] and j, 30, "a pending reason")
    assert job["state"] == "PENDING"  # every device holds a share: none is whole
    shared_device = Counter(devices.values()).most_common(1)[0][0]
    for n, share in enumerate(shares):
        if devices[share] == shared_device:
            (tmp_path / f"release-{n}").touch()
    assert cluster.wait_end(whole)["state"] == "SUCCEEDED"
    assert cluster.logs(whole).strip() == f"{shared_device} [none]"
    assert all(cluster.job(share)["state"] == ("SUCCEEDED" if devices[share] == shared_device else "RUNNING")
               for share in shares)
    for n in range(3):
        (tmp_path / f"release-{n}").touch()
    assert all(cluster.wait_end(share)["state"] == "SUCCEEDED" for share in shares)


def test_the_python_client_asks_for_a_quarter_of_a_gpu(bare_cluster):
    cluster = bare_cluster
    cluster.start_worker("gpu-box", 2, "--gpus", "1")
    with Client(cluster.url, cluster.admin_token) as api:
        job = api.submit({"command": ["sh", "-c", 'echo "$CUDA_VISIBLE_DEVICES $CORRAL_GPU_SHARE"'],
                          "resources": {"gpu": 0.25}})
    assert cluster.wait_end(job.id)["state"] == "SUCCEEDED"
    assert cluster.logs(job.id).strip() == "0 0.25"
